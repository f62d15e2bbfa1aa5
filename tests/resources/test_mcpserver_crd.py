"""The MCPServer CRD on a real apiserver: defaults, and bad specs refused with messages that
name the field."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from lestrade.resources.constants import GROUP, MCPSERVER_PLURAL, VERSION


def _create(api_client: k8s.ApiClient, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        MCPSERVER_PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MCPServer", "metadata": {"name": name}, "spec": spec},
    )


def test_defaults(api_client: k8s.ApiClient, crds: None, namespace: str) -> None:
    obj = _create(api_client, namespace, "grafana", url="http://grafana-mcp.tools:8000/mcp")
    spec = obj["spec"]
    assert spec["transport"] == "StreamableHTTP" and spec["trustHints"] is False
    assert spec["maxOutputChars"] == 30000  # timeouts: the model's defaults (10s, 30s) when omitted


@pytest.mark.parametrize(
    "name, spec, message",
    [
        ("a" * 31, {"url": "http://x:1/mcp"}, "metadata.name: at most 30 characters"),
        ("under_score", {"url": "http://x:1/mcp"}, "metadata.name"),
        ("bad-url", {"url": "file:///etc/passwd"}, "spec.url"),
        ("bad-transport", {"url": "http://x:1/mcp", "transport": "stdio"}, "spec.transport"),
        ("bad-timeout", {"url": "http://x:1/mcp", "timeouts": {"call": "forever"}}, "spec.timeouts.call"),
        (
            "bad-header",
            {"url": "http://x:1/mcp", "headers": [{"name": "X: y", "secretKeyRef": {"name": "s", "key": "k"}}]},
            "spec.headers[0].name",
        ),
        (
            "bad-approval",
            {"url": "http://x:1/mcp", "approval": [{"tools": ["*"], "approval": "Never"}]},
            "spec.approval[0].approval",
        ),
        ("bad-limit", {"url": "http://x:1/mcp", "maxOutputChars": 10}, "spec.maxOutputChars"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(
    api_client: k8s.ApiClient, crds: None, namespace: str, name: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(k8s.ApiException) as refused:
        _create(api_client, namespace, name, **spec)
    assert refused.value.status == 422
    assert message in refused.value.body, refused.value.body
