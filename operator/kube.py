"""Async access to the Kubernetes API for the operator's own reads and writes.

The official client is synchronous, so every call runs in a thread pool of its own: the event
loop (and with it Kopf's watch streams and every other investigation) never waits on a socket,
and a burst of transcript writes cannot starve the default executor that other code shares.

Calls go through the client's raw request path and return plain dicts. The operator writes
status patches and transcript chunks at a high rate; building generated model objects for every
response would cost more CPU than the request itself, and the operator only needs a few fields.

Transient failures (connection errors, 429, 5xx) are retried a few times with a short backoff:
every write the operator makes is idempotent (merge patches with deterministic keys, creates
that treat 409 as "already there"), so a retry never duplicates anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from lestrade.resources.constants import GROUP, INVESTIGATION_PLURAL, VERSION

__all__ = [
    "ApiException",
    "Kube",
    "make_api_client",
    "investigation_path",
    "is_not_found",
    "is_conflict",
]

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
_RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def make_api_client(kubeconfig: str | None = None, pool_size: int = 32) -> k8s.ApiClient:
    """An ApiClient for this process: the kubeconfig if one is given or set, else in-cluster."""
    configuration = k8s.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return k8s.ApiClient(configuration)


def investigation_path(namespace: str, name: str = "") -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{INVESTIGATION_PLURAL}"
    return f"{base}/{quote(name)}" if name else base


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 409


class Kube:
    """Plain-JSON REST calls on a shared ApiClient, each in the pool's threads."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        threads: int = 16,
        request_timeout: float = 30.0,
        retries: int = 4,
    ) -> None:
        self.api_client = api_client
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="lestrade-kube")
        self._timeout = request_timeout
        self._retries = retries
        # urllib3 blocks (or warns and discards) when more threads than pooled connections call
        # at once; size the pool for the threads.
        cfg = api_client.configuration
        if (cfg.connection_pool_maxsize or 0) < threads:
            cfg.connection_pool_maxsize = threads
            api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = threads

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _call(
        self,
        method: str,
        path: str,
        body: Any,
        query: dict[str, Any] | None,
        content_type: str,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method, url, headers, body, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query.items()) if query else None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(
            method, url, header_params=headers, body=body, _request_timeout=self._timeout
        )
        raw = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(
                status=response.status,
                reason=response.reason,
                body=raw.decode("utf-8", "replace") if raw else None,
            )
        return json.loads(raw) if raw else None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One REST call; JSON in, JSON out. Raises ApiException for non-2xx answers."""
        loop = asyncio.get_running_loop()
        delay = 0.05
        for attempt in range(self._retries + 1):
            try:
                return await loop.run_in_executor(
                    self._pool, self._call, method, path, body, query, content_type
                )
            except ApiException as exc:
                if exc.status not in _RETRYABLE_STATUS or attempt == self._retries:
                    raise
                error: BaseException = exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if attempt == self._retries:
                    raise
                error = exc
            logger.debug("retrying %s %s after %s", method, path, error)
            await asyncio.sleep(delay * (1 + random.random()))
            delay = min(delay * 4, 2.0)
        raise AssertionError("unreachable")

    async def get(self, path: str, **query: Any) -> Any:
        return await self.request("GET", path, query=query or None)

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("POST", path, body)

    async def patch(self, path: str, body: dict[str, Any]) -> Any:
        """A JSON merge patch (RFC 7386): maps merge, lists and scalars replace."""
        return await self.request("PATCH", path, body, content_type=MERGE_PATCH)

    async def delete(self, path: str, **query: Any) -> Any:
        return await self.request("DELETE", path, query=query or None)
