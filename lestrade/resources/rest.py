"""Send plain JSON to the apiserver through a kubernetes `ApiClient`.

The generated client (v37) validates request bodies into its own pydantic models, which for a
CRD means round-tripping our schema through `V1JSONSchemaProps` — a chance to lose or reshape
extension fields we rely on (`x-kubernetes-validations`, defaults). Sending the dicts as they
are, with the client's auth and TLS settings, avoids that and lets callers pick the patch type.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

__all__ = ["request_json", "MERGE_PATCH", "JSON_PATCH", "TABLE"]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# What `kubectl get` asks for: rows rendered with the printer columns.
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def request_json(
    api_client: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, Any] | None = None,
    content_type: str = "application/json",
    accept: str = "application/json",
    timeout: float | None = None,
) -> Any:
    """Call `path` on the apiserver; the decoded JSON answer, or ApiException on non-2xx."""
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type
    method, url, headers, body, _ = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=list((query or {}).items()),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(
            http_resp=response, body=data.decode("utf-8", "replace") if data else None, data=None
        )
    return json.loads(data) if data else None
