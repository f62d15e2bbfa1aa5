"""The read-only Kubernetes toolset, named like HolmesGPT's so clients that show tool names work.

Everything goes through the caller's `ApiClient` (the operator passes credentials scoped to
what it may read). Nothing here writes, and nothing here can return a Secret's values: lists are
server-side tables (no data), and single Secrets go through `secret_view`/`describe_secret`.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient

from lestrade.operator.tools.base import Tool, ToolOutput, Toolset
from lestrade.operator.tools.common import FunctionTool, Params, ToolInputError, schema
from lestrade.operator.tools.kubernetes.api import ApiResource, KubeApi, KubeError, ScopedKubeApi
from lestrade.operator.tools.kubernetes.changes import WhatChanged
from lestrade.operator.tools.kubernetes.describe import describe_node, describe_object, describe_pod, to_yaml
from lestrade.operator.tools.kubernetes.digest import digest_log
from lestrade.operator.tools.kubernetes.format import (
    events_table,
    format_cpu,
    format_memory,
    quantity,
    render_table,
    server_table_rows,
)
from lestrade.operator.tools.kubernetes.sanitize import clean_object

__all__ = ["kubernetes_toolset", "parse_since"]

_LOG_LIMIT_BYTES = 512 * 1024
_DEFAULT_TAIL = 200  # raw lines (`raw=true`)
_DEFAULT_DIGEST_TAIL = 2000  # a digest reads further back for the same tokens
_MAX_TAIL = 5000
_MAX_GREP = 200

_INSTRUCTIONS = """\
Kubernetes tools only read; kinds are kubectl names (po, deploy, svc, CRD plurals); Secret
values are never shown. Start with kubectl_describe (state, last termination, restarts, events)
or kubectl_events; kubectl_previous_logs shows the crash behind a restart. The logs tools read
the crashed containers (else all; container= picks one), the last {digest_tail} lines as a
digest: repeats counted with first/last times, errors and the last lines verbatim. raw=true: the
lines themselves (last {raw_tail}); grep=: lines containing it (any case); since= e.g. 15m.
Incidents follow changes: ask what_changed early."""

S = {"type": "string"}
KIND = {"type": "string"}
NS = {"type": "string"}


def troubled_containers(pod: dict[str, Any], *, previous: bool) -> list[str]:
    """The containers whose logs explain a failure: those that restarted, crashed or are waiting
    after a failure (for previous logs: those with a terminated previous instance). Empty when
    none is in trouble — then every container's logs are read. A healthy sidecar's access log is
    left out unless asked for: it is most of the tokens and none of the evidence."""
    troubled = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if not isinstance(status, dict) or not isinstance(status.get("name"), str):
            continue
        last = (status.get("lastState") or {}).get("terminated")
        waiting = (status.get("state") or {}).get("waiting") or {}
        terminated = (status.get("state") or {}).get("terminated") or {}
        if previous:
            if last:
                troubled.append(status["name"])
        elif (
            last
            or (status.get("restartCount") or 0) > 0
            or waiting.get("reason") in ("CrashLoopBackOff", "Error", "RunContainerError")
            or (terminated and terminated.get("exitCode") not in (0, None))
        ):
            troubled.append(status["name"])
    return troubled


def parse_since(value: str | None) -> int | None:
    """`90`, `30s`, `15m`, `2h`, `1h30m`, `1d` → seconds."""
    if not value:
        return None
    text = value.strip().lower()
    if text.isdigit():
        return int(text)
    parts = re.findall(r"(\d+)\s*([smhd])", text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s+", "", text):
        raise ToolInputError(f"cannot read duration '{value}'; use forms like 30s, 15m, 2h")
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * scale[u] for n, u in parts)


class _KubeTools:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    # --- helpers -----------------------------------------------------------------------------

    async def _locate(self, res: ApiResource, name: str, namespace: str | None) -> dict[str, Any]:
        """Get one object; a namespaced object without a namespace is searched for everywhere."""
        if not res.namespaced or namespace:
            return await self.api.get(res, name, namespace if res.namespaced else None)
        items = await self.api.list_items(res, fieldSelector=f"metadata.name={name}")
        if not items:
            raise KubeError(f'{res.display} "{name}" not found in any namespace')
        if len(items) > 1:
            where = ", ".join(i["metadata"]["namespace"] for i in items)
            raise ToolInputError(f'{res.display} "{name}" exists in several namespaces ({where}); pass namespace')
        item = items[0]
        item.setdefault("kind", res.kind)
        item.setdefault("apiVersion", res.api_version)
        return item

    # --- get ---------------------------------------------------------------------------------

    async def get_by_name(self, p: Params) -> str:
        res = await self.api.resolve(p.required("kind"))
        name, namespace = p.name("name"), p.name("namespace", required=False)
        if res.namespaced and not namespace:
            namespace = (await self._locate(res, name, None))["metadata"]["namespace"]  # type: ignore[arg-type]
        table = await self.api.table(res, namespace if res.namespaced else None, name)
        headers, rows = server_table_rows(table, with_labels=True)
        return render_table(headers, rows)

    async def get_in_namespace(self, p: Params) -> str:
        res = await self.api.resolve(p.required("kind"))
        namespace = p.name("namespace")
        table = await self.api.table(res, namespace if res.namespaced else None, limit=500)
        headers, rows = server_table_rows(table, with_labels=True)
        if not rows:
            return f"No resources found in {namespace} namespace." if res.namespaced else "No resources found."
        return render_table(headers, rows) + _more_note(table)

    async def get_in_cluster(self, p: Params) -> str:
        res = await self.api.resolve(p.required("kind"))
        table = await self.api.table(res, None, limit=500)
        headers, rows = server_table_rows(table, with_namespace=res.namespaced, with_labels=True)
        if not rows:
            return "No resources found."
        return render_table(headers, rows) + _more_note(table)

    async def find(self, p: Params) -> str:
        keyword = p.required("keyword").lower()
        kind = p.opt_str("kind")
        kinds = [await self.api.resolve(kind)] if kind else await self.api.common_kinds()
        sections = []

        async def search(res: ApiResource) -> str | None:
            try:
                table = await self.api.table(res, None, limit=2000)
            except KubeError:
                return None
            headers, rows = server_table_rows(table, with_namespace=res.namespaced, with_labels=True)
            # The whole row, as `kubectl get -A -o wide --show-labels | grep` sees it: a status
            # (CrashLoopBackOff, Pending, ImagePullBackOff), an image, a node or an IP matches
            # as well as a name, a namespace or a label.
            hits = [r for r in rows if keyword in _row_text(r)]
            if not hits:
                return None
            return f"{res.display}:\n{render_table(headers, hits, max_rows=50)}"

        for found in await asyncio.gather(*(search(r) for r in kinds)):
            if found:
                sections.append(found)
        if not sections:
            scope = kind or ", ".join(r.plural for r in kinds)
            return f"No {scope} match '{keyword}' in any column (name, namespace, status, labels, ...)."
        return "\n\n".join(sections)

    async def get_yaml(self, p: Params) -> str:
        res = await self.api.resolve(p.required("kind"))
        obj = await self._locate(res, p.name("name"), p.name("namespace", required=False))  # type: ignore[arg-type]
        obj.setdefault("kind", res.kind)
        return to_yaml(clean_object(obj))

    # --- describe / events ---------------------------------------------------------------------

    async def describe(self, p: Params) -> str:
        res = await self.api.resolve(p.required("kind"))
        obj = await self._locate(res, p.name("name"), p.name("namespace", required=False))  # type: ignore[arg-type]
        obj.setdefault("kind", res.kind)
        events = await self._events_or_none(obj)
        if res.group == "" and res.plural == "pods":
            return describe_pod(obj, events)
        if res.group == "" and res.plural == "nodes":
            pods_res = await self.api.resolve("pods")
            pods = await self.api.list_items(pods_res, fieldSelector=f"spec.nodeName={obj['metadata']['name']}")
            return describe_node(obj, pods, events)
        extra = ""
        if res.group == "apps" and res.plural == "deployments":
            extra = await self._replicasets_line(obj)
        return describe_object(obj, events, extra=extra)

    async def _events_or_none(self, obj: dict[str, Any]) -> list[dict[str, Any]] | None:
        try:
            return await self.api.events_for(obj)
        except KubeError:
            return None  # no permission to read events: describe still works

    async def _replicasets_line(self, deployment: dict[str, Any]) -> str:
        try:
            rs_res = await self.api.resolve("replicasets.apps")
            items = await self.api.list_items(rs_res, deployment["metadata"]["namespace"])
        except (KubeError, ToolInputError):
            return ""
        uid = deployment["metadata"].get("uid")
        owned = [r for r in items if any(o.get("uid") == uid for o in r["metadata"].get("ownerReferences") or [])]
        if not owned:
            return "ReplicaSets:       <none>"
        owned.sort(
            key=lambda r: int((r["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", 0))
        )
        parts = [
            f"{r['metadata']['name']} ({(r.get('status') or {}).get('replicas', 0)}/{(r.get('spec') or {}).get('replicas', 0)} replicas, "
            f"revision {(r['metadata'].get('annotations') or {}).get('deployment.kubernetes.io/revision', '?')})"
            for r in owned[-3:]
        ]
        return "ReplicaSets:       " + "; ".join(parts)

    async def events(self, p: Params) -> str:
        namespace = p.name("namespace", required=False)
        name = p.name("name", required=False)
        kind = p.opt_str("kind")
        if name:
            res = await self.api.resolve(kind or "pod")
            obj = await self._locate(res, name, namespace)
            events = await self.api.events_for(obj)
            if not events:
                return f"No events for {res.kind.lower()}/{name}."
            return events_table(events, with_object=False)
        selector = None
        if kind:
            res = await self.api.resolve(kind)
            selector = f"involvedObject.kind={res.kind}"
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events" if namespace else "/api/v1/events"
        data = await self.api.get_json(path, {"fieldSelector": selector, "limit": 2000})
        events = list(data.get("items") or [])
        if not events:
            return f"No events found in {namespace} namespace." if namespace else "No events found."
        return events_table(events, with_namespace=not namespace)

    # --- logs --------------------------------------------------------------------------------

    async def logs(self, p: Params, *, previous: bool) -> str:
        namespace, pod_name = p.name("namespace"), p.name("pod_name")
        container = p.name("container", required=False)
        raw = p.boolean("raw")
        tail = p.integer("tail", _DEFAULT_TAIL if raw else _DEFAULT_DIGEST_TAIL, lo=1, hi=_MAX_TAIL)
        since = parse_since(p.opt_str("since"))
        grep = p.opt_str("grep")
        if grep is not None and len(grep) > _MAX_GREP:
            raise ToolInputError(f"parameter 'grep' must be at most {_MAX_GREP} characters")
        pods = await self.api.resolve("pods")
        pod = await self.api.get(pods, pod_name, namespace)  # type: ignore[arg-type]
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        init_names = [c["name"] for c in (pod.get("spec") or {}).get("initContainers") or []]
        if container and container not in names + init_names:
            raise ToolInputError(
                f"container '{container}' is not in pod {pod_name}; containers: {', '.join(names + init_names)}"
            )
        targets = [container] if container else troubled_containers(pod, previous=previous) or names
        others = [n for n in names if n not in targets]
        query = {
            "tailLines": tail,
            "sinceSeconds": since,
            "previous": "true" if previous else None,
            "limitBytes": _LOG_LIMIT_BYTES,
        }
        path = pods.path(namespace, pod_name, "log")

        async def one(c: str) -> str:
            try:
                text = await self.api.get_text(path, {**query, "container": c})
            except KubeError as exc:
                return f"<error: {exc}>"
            text = text.rstrip("\n")
            if grep is not None:
                needle = grep.casefold()
                text = "\n".join(line for line in text.split("\n") if needle in line.casefold())
                if not text:
                    return f"<no log lines contain {grep!r}>"
            if not text:
                return "<no log lines>"
            return text if raw else digest_log(text)

        results = await asyncio.gather(*(one(c) for c in targets))
        note = (
            f"\n[other containers, not shown: {', '.join(others)} — pass container=NAME for their logs]"
            if others
            else ""
        )
        if len(targets) == 1:
            if results[0].startswith("<error: "):
                raise KubeError(results[0][8:-1])
            return results[0] + note
        return (
            "\n\n".join(
                f"==> container {c}{' (previous)' if previous else ''} <==\n{text}" for c, text in zip(targets, results)
            )
            + note
        )

    # --- top ---------------------------------------------------------------------------------

    async def _metrics_available(self) -> bool:
        return await self.api.has_group("metrics.k8s.io")

    async def metrics_served(self) -> bool:
        """Whether kubectl_top_* can work (cheap: the shared discovery, no forced refresh)."""
        return await self.api.serves_group("metrics.k8s.io")

    async def top_pods(self, p: Params) -> ToolOutput | str:
        namespace = p.name("namespace", required=False)
        if not await self._metrics_available():
            return ToolOutput(status="error", error=_NO_METRICS)
        path = (
            "/apis/metrics.k8s.io/v1beta1" + (f"/namespaces/{quote(namespace, safe='')}" if namespace else "") + "/pods"
        )
        data = await self.api.get_json(path)
        return format_top_pods(data.get("items") or [], with_namespace=not namespace)

    async def top_nodes(self, p: Params) -> ToolOutput | str:
        if not await self._metrics_available():
            return ToolOutput(status="error", error=_NO_METRICS)
        data = await self.api.get_json("/apis/metrics.k8s.io/v1beta1/nodes")
        nodes = await self.api.list_items(await self.api.resolve("nodes"))
        allocatable = {n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or {} for n in nodes}
        return format_top_nodes(data.get("items") or [], allocatable)


_NO_METRICS = (
    "metrics API not available: the cluster does not serve metrics.k8s.io (metrics-server is not "
    "installed or not ready), so live CPU/memory usage cannot be read. Use kubectl_describe for "
    "requests/limits, or Prometheus tools if configured."
)


def format_top_pods(items: list[dict[str, Any]], *, with_namespace: bool) -> str:
    rows = []
    for item in sorted(items, key=lambda i: (i["metadata"].get("namespace", ""), i["metadata"]["name"])):
        cpu = sum((quantity(c["usage"].get("cpu", 0)) for c in item.get("containers") or []), quantity(0))
        mem = sum((quantity(c["usage"].get("memory", 0)) for c in item.get("containers") or []), quantity(0))
        row = [item["metadata"]["name"], format_cpu(cpu), format_memory(mem)]
        if with_namespace:
            row.insert(0, item["metadata"].get("namespace"))
        rows.append(row)
    if not rows:
        return "No pod metrics found."
    headers = ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    if with_namespace:
        headers.insert(0, "NAMESPACE")
    return render_table(headers, rows)


def format_top_nodes(items: list[dict[str, Any]], allocatable: dict[str, dict[str, Any]]) -> str:
    rows = []
    for item in sorted(items, key=lambda i: i["metadata"]["name"]):
        name = item["metadata"]["name"]
        cpu, mem = quantity(item["usage"].get("cpu", 0)), quantity(item["usage"].get("memory", 0))
        alloc = allocatable.get(name, {})
        a_cpu, a_mem = quantity(alloc.get("cpu", 0)), quantity(alloc.get("memory", 0))
        rows.append(
            [
                name,
                format_cpu(cpu),
                f"{int(cpu * 100 / a_cpu)}%" if a_cpu else "<unknown>",
                format_memory(mem),
                f"{int(mem * 100 / a_mem)}%" if a_mem else "<unknown>",
            ]
        )
    if not rows:
        return "No node metrics found."
    return render_table(["NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)", "MEMORY%"], rows)


def _row_text(row: list[Any]) -> str:
    """A table row as one lower-case line, the text `grep -i` would search."""
    return "  ".join("" if cell is None else str(cell) for cell in row).lower()


def _more_note(table: dict[str, Any]) -> str:
    meta = table.get("metadata") or {}
    if not meta.get("continue"):
        return ""
    remaining = meta.get("remainingItemCount")
    count = f"{remaining} " if remaining else ""
    return f"\n[{count}more not listed; query a namespace or use kubectl_find_resource]"


def _ns_flag(p: Params) -> str:
    ns = p.opt_str("namespace")
    return f" -n {ns}" if ns else ""


def kubernetes_toolset(api_client: ApiClient, *, namespaces: list[str] | None = None) -> Toolset:
    """Read-only Kubernetes tools over `api_client` (its credentials decide what is visible).
    `namespaces`: the run's scope; lists across namespaces then cover exactly those."""
    k = _KubeTools(ScopedKubeApi(api_client, namespaces) if namespaces else KubeApi(api_client))
    changes = WhatChanged(k.api)
    logs_schema = schema(
        ["pod_name", "namespace"],
        pod_name=S,
        namespace=NS,
        container=S,
        tail={"type": "integer"},
        since=S,
        grep=S,
        raw={"type": "boolean"},
    )

    def logs_line(prev: bool) -> Any:
        return lambda p: (
            f"kubectl logs{' --previous' if prev else ''} {p.opt_str('pod_name')}{_ns_flag(p)}"
            f"{' -c ' + p.opt_str('container') if p.opt_str('container') else ''}"
        )

    tools: list[Tool] = [
        FunctionTool(
            "kubectl_describe",
            "kubectl describe, with events.",
            schema(["kind", "name"], kind=KIND, name=S, namespace=NS),
            k.describe,
            lambda p: f"kubectl describe {p.opt_str('kind')} {p.opt_str('name')}{_ns_flag(p)}",
        ),
        FunctionTool(
            "kubectl_get_by_name",
            "One resource as a wide table row with labels.",
            schema(["kind", "name"], kind=KIND, name=S, namespace=NS),
            k.get_by_name,
            lambda p: f"kubectl get {p.opt_str('kind')} {p.opt_str('name')}{_ns_flag(p)} -o wide --show-labels",
        ),
        FunctionTool(
            "kubectl_get_by_kind_in_namespace",
            "List resources of a kind in a namespace.",
            schema(["kind", "namespace"], kind=KIND, namespace=NS),
            k.get_in_namespace,
            lambda p: f"kubectl get {p.opt_str('kind')}{_ns_flag(p)} -o wide --show-labels",
        ),
        FunctionTool(
            "kubectl_get_by_kind_in_cluster",
            "List resources of a kind in all namespaces.",
            schema(["kind"], kind=KIND),
            k.get_in_cluster,
            lambda p: f"kubectl get {p.opt_str('kind')} -A -o wide --show-labels",
        ),
        FunctionTool(
            "kubectl_find_resource",
            "Resources in all namespaces whose `kubectl get -A -o wide --show-labels` row contains the "
            "keyword (any case): name, label, status, image, node.",
            schema(["keyword"], keyword=S, kind={"type": "string", "description": "default: common kinds"}),
            k.find,
            lambda p: (
                f"kubectl get {p.opt_str('kind') or 'all'} -A -o wide --show-labels | grep -i {p.opt_str('keyword')}"
            ),
        ),
        FunctionTool(
            "kubectl_get_yaml",
            "A resource's full YAML (credentials masked).",
            schema(["kind", "name"], kind=KIND, name=S, namespace=NS),
            k.get_yaml,
            lambda p: f"kubectl get {p.opt_str('kind')} {p.opt_str('name')}{_ns_flag(p)} -o yaml",
        ),
        FunctionTool(
            "kubectl_events",
            "Events by time, of one object (kind+name), a namespace, or all namespaces.",
            schema(None, namespace=NS, kind=S, name=S),
            k.events,
            lambda p: (
                f"kubectl events{_ns_flag(p) or ' -A'}"
                + (f" --for {p.opt_str('kind') or 'pod'}/{p.opt_str('name')}" if p.opt_str("name") else "")
            ),
        ),
        FunctionTool(
            "kubectl_logs",
            "Logs of a pod's current containers.",
            logs_schema,
            lambda p: k.logs(p, previous=False),
            logs_line(False),
            keep="tail",
        ),
        FunctionTool(
            "kubectl_previous_logs",
            "Logs of a pod's previous (crashed) containers.",
            logs_schema,
            lambda p: k.logs(p, previous=True),
            logs_line(True),
            keep="tail",
        ),
        FunctionTool(
            "kubectl_top_pods",
            "Live pod CPU/memory usage (metrics API).",
            schema(None, namespace=NS),
            k.top_pods,
            lambda p: f"kubectl top pods{_ns_flag(p) or ' -A'}",
            available=k.metrics_served,
        ),
        FunctionTool(
            "kubectl_top_nodes",
            "Live node CPU/memory usage (metrics API).",
            schema(None),
            k.top_nodes,
            lambda p: "kubectl top nodes",
            available=k.metrics_served,
        ),
        FunctionTool(
            "what_changed",
            "Changes in a namespace (or one workload), newest first: rollouts with their template diff, "
            "scaling, edited ConfigMaps, Services, Ingresses, NetworkPolicies, HPAs, PDBs, RBAC (who, when, which "
            "keys), node restarts.",
            schema(
                ["namespace"],
                namespace=NS,
                minutes={"type": "integer", "description": "default 60"},
                workload={"type": "string", "description": "deployment/NAME, statefulset/NAME or daemonset/NAME"},
            ),
            changes.run,
            lambda p: (
                f"what changed in {p.opt_str('namespace')}{' for ' + p.opt_str('workload') if p.opt_str('workload') else ''}"  # type: ignore[operator]
                f" (last {p.opt_str('minutes') or '60'}m)"
            ),
        ),
    ]
    instructions = _INSTRUCTIONS.format(digest_tail=_DEFAULT_DIGEST_TAIL, raw_tail=_DEFAULT_TAIL)
    return Toolset(name="kubernetes", tools=tools, instructions=instructions, read_only=True)
