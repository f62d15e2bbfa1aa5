"""A small async, read-mostly view of the Kubernetes API for the tools, over the official client.

Why not the typed APIs: the model names arbitrary kinds ("po", "deploy", "certificates"), so the
tools resolve names through API discovery, the way kubectl does, and then speak to the generic
REST paths with the official `ApiClient` (which carries the caller's credentials and TLS
settings). Blocking client calls run in a thread pool of their own (`_POOL`), not the event
loop's default one: that one has cpu+4 threads, so with hundreds of runs in one operator the
tool calls queued behind each other (and behind everything else using `to_thread`).

Discovery (`/api/v1`, `/apis`, one GET per group) is shared by every `KubeApi` on the same
`ApiClient` (`_Discovery`): the operator builds a registry per run, and discovering per run
cost ~8 GETs per tool-using run (measured by `bench/burst_bench.py`). A kind the cache does not
know still forces a (rate-limited) refresh, so new CRDs are found as before.

Lists are asked for as server-side Tables (`as=Table`), which is what `kubectl get` prints: the
same columns for every kind, CRDs included. Each row comes with its object so that its cells can
be masked by the structural rules (`sanitize.mask_table`); only the masked metadata is kept.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from lestrade.operator.tools.common import ToolInputError
from lestrade.operator.tools.kubernetes.sanitize import mask_table

__all__ = ["ScopedKubeApi", "ApiResource", "KubeApi", "KubeError"]

_TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
_REQUEST_TIMEOUT = 30

POOL_SIZE = 32
_POOL = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="kube-tools")
"""Threads for the blocking client calls of every tool: enough for many concurrent runs, a
bound so that a burst cannot open hundreds of connections to the apiserver."""


@dataclass
class _Discovery:
    """What discovery found for one ApiClient, shared by all its KubeApi instances."""

    resources: list[ApiResource] | None = None
    groups: set[str] = field(default_factory=set)
    loaded_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


_DISCOVERY: weakref.WeakKeyDictionary[ApiClient, _Discovery] = weakref.WeakKeyDictionary()
_DISCOVERY_LOCK = threading.Lock()


def _discovery_for(api_client: ApiClient) -> _Discovery:
    with _DISCOVERY_LOCK:
        found = _DISCOVERY.get(api_client)
        if found is None:
            found = _DISCOVERY[api_client] = _Discovery()
        return found


class KubeError(RuntimeError):
    """An API error turned into a sentence a model can act on."""


@dataclass(frozen=True)
class ApiResource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    verbs: tuple[str, ...]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def display(self) -> str:
        """`pods`, `deployments.apps` — how kubectl names the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def is_secret(self) -> bool:
        return self.group == "" and self.plural == "secrets"

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
        return base


class KubeApi:
    """Discovery-backed access to any resource; safe to share between concurrent tool calls."""

    def __init__(self, api_client: ApiClient, *, discovery_ttl: float = 300.0) -> None:
        self.api_client = api_client
        self._discovery_ttl = discovery_ttl
        self._discovery = _discovery_for(api_client)
        self._created = time.monotonic()
        """A kind this instance does not know forces a refresh at once if the shared discovery
        is older than the instance (a run sees what existed when it started, as when each run
        discovered for itself); later forced refreshes are rate-limited."""

    # --- raw requests ------------------------------------------------------------------------

    def _request_sync(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        *,
        body: Any = None,
        accept: str = "application/json",
        content_type: str | None = None,
    ) -> bytes:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        query_params = [(k, v) for k, v in (query or {}).items() if v is not None and v != ""]
        request = self.api_client.param_serialize(
            method,
            path,
            query_params=query_params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(*request, _request_timeout=_REQUEST_TIMEOUT)
        except ApiException as exc:
            raise KubeError(_error_message(exc.status, exc.reason, exc.body)) from None
        data = bytes(response.read() or b"")
        if not 200 <= response.status <= 299:
            raise KubeError(_error_message(response.status, response.reason, data))
        return data

    async def request(self, method: str, path: str, query: dict[str, Any] | None = None, **kw: Any) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_POOL, lambda: self._request_sync(method, path, query, **kw))

    async def get_json(
        self, path: str, query: dict[str, Any] | None = None, *, accept: str = "application/json"
    ) -> dict[str, Any]:
        data = await self.request("GET", path, query, accept=accept)
        return json.loads(data)

    async def get_text(self, path: str, query: dict[str, Any] | None = None) -> str:
        data = await self.request("GET", path, query, accept="*/*")
        return data.decode("utf-8", errors="replace")

    async def patch(
        self, path: str, body: Any, *, content_type: str = "application/merge-patch+json"
    ) -> dict[str, Any]:
        data = await self.request("PATCH", path, body=body, content_type=content_type)
        return json.loads(data)

    async def delete(self, path: str) -> dict[str, Any]:
        data = await self.request("DELETE", path)
        return json.loads(data)

    # --- discovery ---------------------------------------------------------------------------

    def _discover_sync(self) -> None:
        resources: list[ApiResource] = []
        groups: set[str] = set()
        core = json.loads(self._request_sync("GET", "/api/v1"))
        resources += _parse_resource_list("", "v1", core)
        group_list = json.loads(self._request_sync("GET", "/apis"))
        for group in group_list.get("groups", []):
            name = group["name"]
            groups.add(name)
            version = (group.get("preferredVersion") or group["versions"][0])["version"]
            try:
                listing = json.loads(self._request_sync("GET", f"/apis/{name}/{version}"))
            except KubeError:
                continue  # an unavailable aggregated API (e.g. metrics-server down) must not break the rest
            resources += _parse_resource_list(name, version, listing)
        self._discovery.resources = resources
        self._discovery.groups = groups
        self._discovery.loaded_at = time.monotonic()

    async def _ensure_discovery(self, *, force: bool = False) -> list[ApiResource]:
        known = self._discovery

        def fresh() -> bool:
            age = time.monotonic() - known.loaded_at
            stale = age > self._discovery_ttl
            # A forced refresh (unknown kind) is rate-limited so typos cannot hammer discovery.
            forced = force and (age > 5 or known.loaded_at < self._created)
            return not (known.resources is None or stale or forced)

        if fresh():  # the common case: answered without a thread hop
            assert known.resources is not None
            return known.resources

        def load() -> list[ApiResource]:
            with known.lock:
                if not fresh():
                    self._discover_sync()
                assert known.resources is not None
                return known.resources

        return await asyncio.get_running_loop().run_in_executor(_POOL, load)

    async def serves_group(self, group: str) -> bool:
        """Whether the last discovery (loaded if none; no forced refresh) lists API `group`."""
        await self._ensure_discovery()
        return group in self._discovery.groups

    async def has_group(self, group: str) -> bool:
        await self._ensure_discovery()
        if group in self._discovery.groups:
            return True
        await self._ensure_discovery(force=True)
        return group in self._discovery.groups

    async def resolve(self, kind: str) -> ApiResource:
        """Find the resource a kubectl-style name means: `po`, `pods`, `Pod`, `deploy`, `deployments.apps`."""
        wanted = kind.strip()
        if not wanted:
            raise ToolInputError("missing required parameter 'kind'")
        for attempt in range(2):
            found = _match(await self._ensure_discovery(force=attempt == 1), wanted)
            if found:
                return found
        raise ToolInputError(
            f"the server doesn't have a resource type '{kind}'; use a kind such as pod, deployment, "
            "service, node, or a CRD's plural name"
        )

    async def resource_of(self, api_version: str, kind: str) -> ApiResource | None:
        """The resource whose objects have this apiVersion and kind (as a listed object says)."""
        group, _, version = api_version.rpartition("/")
        for attempt in range(2):
            for res in await self._ensure_discovery(force=attempt == 1):
                if res.group == group and res.kind == kind:
                    return res if res.version == version else replace(res, version=version)
        return None

    async def common_kinds(self) -> list[ApiResource]:
        names = [
            "pods",
            "deployments",
            "statefulsets",
            "daemonsets",
            "replicasets",
            "jobs",
            "cronjobs",
            "services",
            "ingresses",
            "configmaps",
            "persistentvolumeclaims",
            "nodes",
            "namespaces",
        ]
        out = []
        for name in names:
            try:
                out.append(await self.resolve(name))
            except ToolInputError:
                continue
        return out

    # --- object access -----------------------------------------------------------------------

    async def get(self, res: ApiResource, name: str, namespace: str | None) -> dict[str, Any]:
        return await self.get_json(res.path(namespace, name))

    async def list_items(self, res: ApiResource, namespace: str | None = None, **query: Any) -> list[dict[str, Any]]:
        data = await self.get_json(res.path(namespace), query)
        return list(data.get("items") or [])

    async def table(
        self, res: ApiResource, namespace: str | None = None, name: str | None = None, **query: Any
    ) -> dict[str, Any]:
        """The server-side `kubectl get` table, its cells masked structurally (`mask_table`: a
        printer column can show any field, a CRD's a password) and its rows' objects reduced to
        their masked metadata; never object data."""
        query["includeObject"] = "Object"
        data = await self.request("GET", res.path(namespace, name), query, accept=_TABLE_ACCEPT)
        return (
            await asyncio.to_thread(mask_table, json.loads(data)) if len(data) > 65536 else mask_table(json.loads(data))
        )

    async def events_for(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        meta = obj.get("metadata", {})
        uid = meta.get("uid")
        namespace = meta.get("namespace")
        selector = f"involvedObject.uid={uid}" if uid else f"involvedObject.name={meta.get('name')}"
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events" if namespace else "/api/v1/events"
        data = await self.get_json(path, {"fieldSelector": selector})
        return list(data.get("items") or [])


def _parse_resource_list(group: str, version: str, listing: dict[str, Any]) -> list[ApiResource]:
    out = []
    for r in listing.get("resources", []):
        if "/" in r["name"]:
            continue  # subresources such as pods/log
        out.append(
            ApiResource(
                group=group,
                version=version,
                plural=r["name"],
                singular=r.get("singularName") or r["kind"].lower(),
                kind=r["kind"],
                namespaced=bool(r.get("namespaced")),
                short_names=tuple(r.get("shortNames") or ()),
                verbs=tuple(r.get("verbs") or ()),
            )
        )
    return out


def _match(resources: list[ApiResource], wanted: str) -> ApiResource | None:
    name, _, group = wanted.partition(".")
    name_l = name.lower()
    # `deployments.v1.apps` or `deployments.apps`
    version = None
    if group and "." in group and group.split(".", 1)[0].startswith("v") and group.split(".", 1)[0][1:2].isdigit():
        version, group = group.split(".", 1)
    candidates = [r for r in resources if not group or r.group == group]
    if version:
        candidates = [r for r in candidates if r.version == version] or candidates
    for test in (
        lambda r: r.plural == name_l,
        lambda r: r.singular == name_l,
        lambda r: r.kind.lower() == name_l,
        lambda r: name_l in r.short_names,
    ):
        hits = [r for r in candidates if test(r)]
        if hits:
            # Prefer the core group, then the order the server lists groups (its priority).
            return next((r for r in hits if r.group == ""), hits[0])
    if group:
        # A dotted name that is not a group (e.g. a kind with a dot typo): try the whole string.
        return None
    return None


def _error_message(status: int | None, reason: str | None, body: bytes | str | None) -> str:
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    message = ""
    try:
        message = json.loads(body or "{}").get("message") or ""
    except (ValueError, TypeError, AttributeError):
        message = (body or "")[:300]
    if status == 404 and not message:
        message = "not found"
    return f"{message or reason or 'request failed'} (HTTP {status})"


class ScopedKubeApi(KubeApi):
    """A KubeApi for a run confined to `namespaces`: a list "in every namespace" (no namespace
    given) becomes one list per namespace of the scope, merged, so searches still work for a
    scoped run. The credentials enforce the scope either way; this only asks where it may."""

    def __init__(self, api_client: ApiClient, namespaces: list[str], **kw: Any) -> None:
        super().__init__(api_client, **kw)
        self.namespaces = list(namespaces)

    async def _each(self, fetch: Any) -> list[dict[str, Any]]:
        results = await asyncio.gather(*(fetch(ns) for ns in self.namespaces), return_exceptions=True)
        found = [r for r in results if not isinstance(r, BaseException)]
        if not found:
            error = next(r for r in results if isinstance(r, BaseException))
            raise error
        return found

    async def list_items(self, res: ApiResource, namespace: str | None = None, **query: Any) -> list[dict[str, Any]]:
        if namespace or not res.namespaced:
            return await super().list_items(res, namespace, **query)
        lists = await self._each(lambda ns: super(ScopedKubeApi, self).list_items(res, ns, **query))
        return [item for items in lists for item in items]  # type: ignore[misc]

    async def table(
        self, res: ApiResource, namespace: str | None = None, name: str | None = None, **query: Any
    ) -> dict[str, Any]:
        if namespace or name or not res.namespaced:
            return await super().table(res, namespace, name, **query)
        tables = await self._each(lambda ns: super(ScopedKubeApi, self).table(res, ns, **query))
        merged = dict(tables[0])
        merged["rows"] = [row for t in tables for row in t.get("rows") or []]
        merged["metadata"] = {}
        more = [t for t in tables if (t.get("metadata") or {}).get("continue")]
        if more:
            merged["metadata"] = {
                "continue": "scoped",
                "remainingItemCount": sum(int((t.get("metadata") or {}).get("remainingItemCount") or 0) for t in more)
                or None,
            }
        return merged
