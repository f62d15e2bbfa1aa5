"""Async access to the Kubernetes API: the one request layer of the operator and the API.

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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from lestrade.metrics import count_apiserver_error, count_apiserver_request
from lestrade.resources.constants import (
    CONVERSATION_PLURAL,
    GROUP,
    INVESTIGATION_PLURAL,
    VERSION,
)

__all__ = [
    "ApiException",
    "Kube",
    "KubeSettings",
    "Acting",
    "make_api_client",
    "investigation_path",
    "conversation_path",
    "resource_path",
    "api_path",
    "is_not_found",
    "is_conflict",
]

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
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


def api_path(api_version: str, plural: str, namespace: str | None = None, name: str = "") -> str:
    """The URL path of any object (or collection, without `name`; across namespaces, without
    `namespace`): `v1` is the core group at /api, every other `group/version` is under /apis."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{quote(namespace)}" if namespace else ""
    return f"{prefix}{scope}/{plural}" + (f"/{quote(name)}" if name else "")


def resource_path(plural: str, namespace: str | None, name: str = "") -> str:
    """The URL path of a Lestrade resource (or of its collection when `name` is empty)."""
    return api_path(f"{GROUP}/{VERSION}", plural, namespace, name)


def investigation_path(namespace: str, name: str = "") -> str:
    return resource_path(INVESTIGATION_PLURAL, namespace, name)


def conversation_path(namespace: str, name: str = "") -> str:
    return resource_path(CONVERSATION_PLURAL, namespace, name)


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


class Acting:
    """The writes of a `Kube` made as another user (see `Kube.acting_as`)."""

    def __init__(self, kube: Kube, headers: list[tuple[str, str]]) -> None:
        self._kube = kube
        self._headers = headers

    @property
    def requester(self) -> tuple[str, list[str]]:
        """(user, groups) this writer acts as."""
        user = next((v for k, v in self._headers if k == "Impersonate-User"), "")
        return user, [v for k, v in self._headers if k == "Impersonate-Group"]

    async def create(self, path: str, body: dict[str, Any], *, parse: bool = True) -> Any:
        return await self._kube.request("POST", path, body, parse=parse, headers=self._headers)

    async def patch(self, path: str, body: dict[str, Any], *, parse: bool = True) -> Any:
        return await self._kube.request(
            "PATCH", path, body, content_type=MERGE_PATCH, parse=parse, headers=self._headers
        )


@dataclass(frozen=True)
class KubeSettings:
    """How the request layer talks to the apiserver; `from_env` reads `LESTRADE_KUBE_*`."""

    request_timeout: float = 30.0
    """Seconds for one request (not for watches, which last as long as the server keeps them):
    a request that hangs longer is retried, so a dead connection cannot stall a run."""

    retries: int = 4
    """Retries of a request on connection errors, 429 and 5xx. Every write is idempotent
    (merge patches with deterministic keys, creates that treat 409 as done), so retrying is
    safe; four retries ride out an apiserver restart of a few seconds."""

    backoff: float = 0.05
    """First retry delay in seconds (with jitter, multiplied by 4 per retry, at most 2 s):
    short, because most failures here are a busy apiserver, not a down one."""

    connections: int = 64
    """Open connections per process: hundreds of runs share them; more only adds load."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KubeSettings:
        env = os.environ if env is None else env
        return cls(
            request_timeout=float(env.get("LESTRADE_KUBE_REQUEST_TIMEOUT", cls.request_timeout)),
            retries=int(env.get("LESTRADE_KUBE_RETRIES", cls.retries)),
            backoff=float(env.get("LESTRADE_KUBE_BACKOFF", cls.backoff)),
            connections=int(env.get("LESTRADE_KUBE_CONNECTIONS", cls.connections)),
        )


class Kube:
    """Plain-JSON REST calls with the credentials of `api_client`'s configuration.

    Bound to the event loop it is first used in; `aclose()` when done.
    """

    def __init__(
        self,
        api_client: k8s.ApiClient,
        settings: KubeSettings | None = None,
        *,
        session_factory: Callable[..., aiohttp.ClientSession] = aiohttp.ClientSession,
    ) -> None:
        """`session_factory` is the transport seam: it is called with `connector` and `timeout`
        and returns the session every request goes through, so a test can add trace hooks
        (count requests) or its own connector without patching this class."""
        self.api_client = api_client
        self._cfg = api_client.configuration
        self._base = self._cfg.host.rstrip("/")
        self._ssl = _ssl_context(self._cfg)
        self.settings = settings or KubeSettings.from_env()
        self._timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout)
        self._retries = self.settings.retries
        self._connections = self.settings.connections
        self._session: aiohttp.ClientSession | None = None
        self._session_factory = session_factory

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
            self._session = self._session_factory(
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
        parse: bool | Callable[[bytes], Any],
        refresh: bool,
        extra_headers: Sequence[tuple[str, str]] | None = None,
        accept: str = "application/json",
    ) -> Any:
        # A list of pairs: impersonation repeats Impersonate-Group once per group.
        headers = [("Accept", accept), ("Content-Type", content_type)]
        headers += list(extra_headers or ())
        authorization = self._authorization(refresh)
        if authorization:
            headers.append(("Authorization", authorization))
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        params = {k: str(v) for k, v in (query or {}).items()}
        try:
            async with self._open().request(
                method, self._base + path, data=data, params=params, headers=headers
            ) as response:
                raw = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            count_apiserver_error(method, exc)
            raise
        count_apiserver_request(method, response.status)
        if not 200 <= response.status <= 299:
            raise ApiException(
                status=response.status,
                reason=response.reason,
                body=raw.decode("utf-8", "replace") if raw else None,
            )
        if callable(parse):
            return parse(raw)
        return json.loads(raw) if raw and parse else None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        parse: bool | Callable[[bytes], Any] = True,
        headers: Sequence[tuple[str, str]] | None = None,
        accept: str = "application/json",
    ) -> Any:
        """One REST call; JSON in, JSON out (None with `parse=False`: writes whose answer
        nobody reads, such as transcript appends, skip decoding it; a function: what it makes
        of the raw answer, e.g. only its resourceVersion). Raises ApiException for non-2xx
        answers."""
        delay = self.settings.backoff
        refresh = False
        for attempt in range(self._retries + 1):
            try:
                return await self._once(method, path, body, query, content_type, parse, refresh, headers, accept)
            except ApiException as exc:
                if exc.status == 401 and not refresh and self._cfg.refresh_api_key_hook:
                    refresh = True
                    continue
                if exc.status not in _RETRYABLE_STATUS or attempt == self._retries:
                    raise
                error: BaseException = exc
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                if attempt == self._retries:
                    raise
                error = exc
            logger.debug("retrying %s %s after %s", method, path, error)
            await asyncio.sleep(delay * (1 + random.random()))
            delay = min(delay * 4, 2.0)
        raise AssertionError("unreachable")

    async def get(self, path: str, **query: Any) -> Any:
        return await self.request("GET", path, query=query or None)

    async def get_metadata(self, path: str, **query: Any) -> Any:
        """A list (or object) of metadata only (PartialObjectMetadata): a few hundred bytes per
        object, whatever its spec and status hold."""
        return await self.request("GET", path, query=query or None, accept=METADATA_LIST)

    async def create(self, path: str, body: dict[str, Any], *, parse: bool | Callable[[bytes], Any] = True) -> Any:
        return await self.request("POST", path, body, parse=parse)

    async def patch(self, path: str, body: dict[str, Any], *, parse: bool | Callable[[bytes], Any] = True) -> Any:
        """A JSON merge patch (RFC 7386): maps merge, lists and scalars replace."""
        return await self.request("PATCH", path, body, content_type=MERGE_PATCH, parse=parse)

    async def delete(self, path: str, **query: Any) -> Any:
        return await self.request("DELETE", path, query=query or None)

    def acting_as(
        self,
        user: str,
        groups: Sequence[str] = (),
        uid: str = "",
        extra: Mapping[str, Sequence[str]] | None = None,
    ) -> Acting:
        """Writes on someone's behalf: the apiserver authorizes and admits them as that user
        (Kubernetes impersonation; this identity needs the `impersonate` verb)."""
        headers: list[tuple[str, str]] = [("Impersonate-User", user)]
        headers += [("Impersonate-Group", g) for g in groups]
        if uid:
            headers.append(("Impersonate-Uid", uid))
        for key, values in (extra or {}).items():
            headers += [(f"Impersonate-Extra-{quote(key, safe='')}", v) for v in values]
        return Acting(self, headers)

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        metadata_only: bool = False,
        **query: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """The watch events ({type, object}) of a collection from `resource_version`, until the
        server ends the watch (after about `timeout_seconds`). Bookmarks are included; an
        `ERROR` event (e.g. 410 Gone: the version is too old) is yielded like any other, and
        the caller lists again. Not retried: a watch resumes from the caller's last version."""
        headers = {"Accept": METADATA_OBJECT if metadata_only else "application/json"}
        authorization = self._authorization()
        if authorization:
            headers["Authorization"] = authorization
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
            **{k: str(v) for k, v in query.items()},
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30)
        try:
            async with self._open().get(self._base + path, params=params, headers=headers, timeout=timeout) as response:
                count_apiserver_request("WATCH", response.status)
                if not 200 <= response.status <= 299:
                    raw = await response.read()
                    raise ApiException(
                        status=response.status,
                        reason=response.reason,
                        body=raw.decode("utf-8", "replace") if raw else None,
                    )
                # Split lines ourselves: an object can be larger than aiohttp's line limit.
                buffer = b""
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            yield json.loads(line)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            count_apiserver_error("WATCH", exc)
            raise
