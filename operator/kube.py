"""Async access to the Kubernetes API for the operator's own reads and writes.

The operator writes status patches, transcript chunks and Events at a high rate: with hundreds
of runs in one process, a blocking client in a thread pool spent more CPU on thread hand-offs
and lock contention than on the requests (measured by `bench/operator_bench.py`). So these
calls use aiohttp (Kopf's own HTTP client) in the event loop, with the credentials of the
process's `kubernetes` client configuration (kubeconfig or in-cluster), and return plain
dicts: the operator needs a few fields, not generated model objects.

Transient failures (connection errors, 429, 5xx) are retried a few times with a short backoff:
every write the operator makes is idempotent (merge patches with deterministic keys, creates
that treat 409 as "already there"), so a retry never duplicates anything. A 401 re-reads the
token once (in-cluster service-account tokens rotate).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import ssl
from typing import Any
from urllib.parse import quote

import aiohttp
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


def make_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """An ApiClient for this process: the kubeconfig if one is given or set, else in-cluster."""
    configuration = k8s.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    return k8s.ApiClient(configuration)


def investigation_path(namespace: str, name: str = "") -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{INVESTIGATION_PLURAL}"
    return f"{base}/{quote(name)}" if name else base


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 409


def _ssl_context(cfg: k8s.Configuration) -> ssl.SSLContext | bool:
    if not cfg.verify_ssl:
        return False
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    return context


class Kube:
    """Plain-JSON REST calls with the credentials of `api_client`'s configuration.

    Bound to the event loop it is first used in; `aclose()` when done.
    """

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        request_timeout: float = 30.0,
        retries: int = 4,
        connections: int = 64,
    ) -> None:
        self.api_client = api_client
        self._cfg = api_client.configuration
        self._base = self._cfg.host.rstrip("/")
        self._ssl = _ssl_context(self._cfg)
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._retries = retries
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _authorization(self, refresh: bool = False) -> str | None:
        if refresh and self._cfg.refresh_api_key_hook is not None:
            self._cfg.refresh_api_key_hook(self._cfg)
        keys = self._cfg.api_key or {}
        token = keys.get("authorization") or keys.get("BearerToken")
        if not token:
            return None
        return token if " " in token else f"Bearer {token}"

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._connections),
                timeout=self._timeout,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _once(
        self,
        method: str,
        path: str,
        body: Any,
        query: dict[str, Any] | None,
        content_type: str,
        parse: bool,
        refresh: bool,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        authorization = self._authorization(refresh)
        if authorization:
            headers["Authorization"] = authorization
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        params = {k: str(v) for k, v in (query or {}).items()}
        async with self._open().request(
            method, self._base + path, data=data, params=params, headers=headers
        ) as response:
            raw = await response.read()
            if not 200 <= response.status <= 299:
                raise ApiException(
                    status=response.status,
                    reason=response.reason,
                    body=raw.decode("utf-8", "replace") if raw else None,
                )
            return json.loads(raw) if raw and parse else None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        parse: bool = True,
    ) -> Any:
        """One REST call; JSON in, JSON out (None with `parse=False`: writes whose answer
        nobody reads, such as transcript appends, skip decoding it). Raises ApiException for
        non-2xx answers."""
        delay = 0.05
        refresh = False
        for attempt in range(self._retries + 1):
            try:
                return await self._once(method, path, body, query, content_type, parse, refresh)
            except ApiException as exc:
                if exc.status == 401 and not refresh and self._cfg.refresh_api_key_hook:
                    refresh = True
                    continue
                if exc.status not in _RETRYABLE_STATUS or attempt == self._retries:
                    raise
                error: BaseException = exc
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                if attempt == self._retries:
                    raise
                error = exc
            logger.debug("retrying %s %s after %s", method, path, error)
            await asyncio.sleep(delay * (1 + random.random()))
            delay = min(delay * 4, 2.0)
        raise AssertionError("unreachable")

    async def get(self, path: str, **query: Any) -> Any:
        return await self.request("GET", path, query=query or None)

    async def create(self, path: str, body: dict[str, Any], *, parse: bool = True) -> Any:
        return await self.request("POST", path, body, parse=parse)

    async def patch(self, path: str, body: dict[str, Any], *, parse: bool = True) -> Any:
        """A JSON merge patch (RFC 7386): maps merge, lists and scalars replace."""
        return await self.request("PATCH", path, body, content_type=MERGE_PATCH, parse=parse)

    async def delete(self, path: str, **query: Any) -> Any:
        return await self.request("DELETE", path, query=query or None)
