"""A small async, read-mostly view of the Kubernetes API for the tools.

Why not the typed APIs: the model names arbitrary kinds ("po", "deploy", "certificates"), so the
tools resolve names through API discovery, the way kubectl does, and then speak to the generic
REST paths, with the credentials and TLS settings of the caller's `ApiClient` configuration.

The requests go through `lestrade.kube.Kube` (aiohttp in the event loop), one per client and
event loop, shared by every run's tools (`_Shared`): one pool of kept-alive connections, TLS
negotiated once per connection. They used the blocking `kubernetes` client in a thread pool
before: in a burst of 200 runs through `make run`, ~20 threads contended for the GIL with the
event loop, and urllib3's pool discarded connections and paid a TLS handshake per call.

Discovery (`/api/v1`, `/apis`, one GET per group) is shared by every `KubeApi` on the same
`ApiClient` too: the operator builds a registry per run, and discovering per run cost ~8 GETs
per tool-using run (measured by `bench/burst_bench.py`). A kind the cache does not know still
forces a (rate-limited) refresh, so new CRDs are found as before.

Lists are asked for as server-side Tables (`as=Table`), which is what `kubectl get` prints: the
same columns for every kind, CRDs included. Each row comes with its object so that its cells can
be masked by the structural rules (`sanitize.mask_table`); only the masked metadata is kept.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes.client import ApiClient

from lestrade.kube import ApiException, Kube, KubeSettings
from lestrade.operator.tools.common import ToolInputError
from lestrade.operator.tools.kubernetes.sanitize import mask_table

__all__ = ["ScopedKubeApi", "ApiResource", "KubeApi", "KubeError", "CONNECTIONS", "close_connections"]

_TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
_REQUEST_TIMEOUT = 30

CONNECTIONS = 32
"""Kept-alive connections per tools identity: enough for many concurrent runs, a bound so that
a burst cannot open hundreds of connections to the apiserver."""

_REFRESH_EVERY = 30.0
"""Seconds between calls of the client's token refresh hook (the tools identity renews its
token, and bash's kubeconfig, at half its lifetime). It may block (a TokenRequest), so it runs
in a thread, at most this often, instead of on every request as the blocking client did."""


@dataclass
class _Shared:
    """What every KubeApi on one ApiClient shares: discovery, and one `Kube` per event loop."""

    resources: list[ApiResource] | None = None
    groups: set[str] = field(default_factory=set)
    loaded_at: float = 0.0
    refreshed_at: float = 0.0
    kubes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Kube] = field(default_factory=weakref.WeakKeyDictionary)
    locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = field(
        default_factory=weakref.WeakKeyDictionary
    )


_SHARED: weakref.WeakKeyDictionary[ApiClient, _Shared] = weakref.WeakKeyDictionary()


def _shared_for(api_client: ApiClient) -> _Shared:
    found = _SHARED.get(api_client)
    if found is None:
        found = _SHARED[api_client] = _Shared()
    return found


async def close_connections() -> None:
    """Closes the tools' connections opened in the running event loop (at the process's end)."""
    loop = asyncio.get_running_loop()
    for shared in list(_SHARED.values()):
        kube = shared.kubes.pop(loop, None)
        if kube is not None:
            await kube.aclose()


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
        self._discovery = _shared_for(api_client)
        self._created = time.monotonic()
        """A kind this instance does not know forces a refresh at once if the shared discovery
        is older than the instance (a run sees what existed when it started, as when each run
        discovered for itself); later forced refreshes are rate-limited."""

    # --- raw requests ------------------------------------------------------------------------

    async def _kube(self) -> Kube:
        shared = self._discovery
        config = self.api_client.configuration
        hook = config.refresh_api_key_hook
        if hook is not None and time.monotonic() - shared.refreshed_at > _REFRESH_EVERY:
            shared.refreshed_at = time.monotonic()
            await asyncio.to_thread(hook, config)
        loop = asyncio.get_running_loop()
        kube = shared.kubes.get(loop)
        if kube is None:
            settings = KubeSettings.from_env()
            settings = replace(settings, request_timeout=_REQUEST_TIMEOUT, connections=CONNECTIONS)
            kube = shared.kubes[loop] = Kube(self.api_client, settings)
        return kube

    async def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        *,
        body: Any = None,
        accept: str = "application/json",
        content_type: str = "application/json",
    ) -> bytes:
        kube = await self._kube()
        params = {
            k: str(v).lower() if isinstance(v, bool) else v
            for k, v in (query or {}).items()
            if v is not None and v != ""
        }
        try:
            return await kube.request(
                method,
                path,
                body,
                query=params,
                accept=accept,
                content_type=content_type,
                parse=bytes,
            )
        except ApiException as exc:
            raise KubeError(_error_message(exc.status, exc.reason, exc.body)) from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise KubeError(f"cannot reach the Kubernetes API: {exc or type(exc).__name__}") from None

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

    async def _discover(self) -> None:
        core, group_list = await asyncio.gather(self.get_json("/api/v1"), self.get_json("/apis"))
        groups: dict[str, str] = {}
        for group in group_list.get("groups", []):
            groups[group["name"]] = (group.get("preferredVersion") or group["versions"][0])["version"]
        listings = await asyncio.gather(
            *(self.get_json(f"/apis/{name}/{version}") for name, version in groups.items()), return_exceptions=True
        )
        resources = _parse_resource_list("", "v1", core)
        for (name, version), listing in zip(groups.items(), listings, strict=True):
            if isinstance(listing, KubeError):
                continue  # an unavailable aggregated API (e.g. metrics-server down) must not break the rest
            if isinstance(listing, BaseException):
                raise listing
            resources += _parse_resource_list(name, version, listing)
        self._discovery.resources = resources
        self._discovery.groups = set(groups)
        self._discovery.loaded_at = time.monotonic()

    async def _ensure_discovery(self, *, force: bool = False) -> list[ApiResource]:
        known = self._discovery

        def fresh() -> bool:
            age = time.monotonic() - known.loaded_at
            stale = age > self._discovery_ttl
            # A forced refresh (unknown kind) is rate-limited so typos cannot hammer discovery.
            forced = force and (age > 5 or known.loaded_at < self._created)
            return not (known.resources is None or stale or forced)

        if not fresh():
            # One discovery at a time per client and loop: the runs of a burst wait for it.
            lock = known.locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
            async with lock:
                if not fresh():
                    await self._discover()
        assert known.resources is not None
        return known.resources

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
