"""`what_changed`: what changed in a namespace (or for one workload) in the last N minutes.

The first question of every incident, answered from what the apiserver keeps, newest first:
- rollouts: a Deployment's ReplicaSets (StatefulSets' and DaemonSets' ControllerRevisions) are
  its pod template's history, so a new revision is diffed against the one before it: images,
  env var *names* (never values), resources, probes, volumes and mounts, command and args;
- scaling: who set `spec.replicas` and when (managed fields), what an HPA decided;
- objects modified: ConfigMaps, Services, Ingresses, NetworkPolicies, HPAs, PDBs, Roles,
  RoleBindings and ServiceAccounts, from their managed fields (time, manager, operation, and
  which keys: a ConfigMap's data keys, never its values);
- nodes: Ready transitions and new nodes (of the nodes that run the namespace's pods).

What the apiserver does not keep is not shown: deleted objects (kubectl_events may tell) and
older values of a field. Secrets are never read. The text is bounded (`_BUDGET_CHARS`, about
2k tokens): the newest changes win, and the rest is counted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lestrade.operator.tools.common import Params, ToolInputError
from lestrade.operator.tools.kubernetes.api import KubeApi, KubeError

__all__ = ["WhatChanged", "template_diff"]

_BUDGET_CHARS = 8000
_MAX_MINUTES = 7 * 24 * 60
_WORKLOADS = {"deployment": "deployments", "statefulset": "statefulsets", "daemonset": "daemonsets"}
_ALIASES = {
    "deploy": "deployment",
    "deployments": "deployment",
    "sts": "statefulset",
    "statefulsets": "statefulset",
    "ds": "daemonset",
    "daemonsets": "daemonset",
}
# kinds whose edits matter in an incident; `display` is how kubectl names them
_WATCHED = [
    ("configmaps", "configmap"),
    ("services", "service"),
    ("ingresses", "ingress"),
    ("networkpolicies", "networkpolicy"),
    ("horizontalpodautoscalers", "hpa"),
    ("poddisruptionbudgets", "pdb"),
    ("roles", "role"),
    ("rolebindings", "rolebinding"),
    ("serviceaccounts", "serviceaccount"),
]


# what every namespace gets at its creation: not a change anyone made
_BOOTSTRAP = {("configmap", "kube-root-ca.crt"), ("serviceaccount", "default")}


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _hhmm(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%H:%M:%SZ")


@dataclass(order=True)
class _Change:
    when: datetime
    # Times have one-second resolution; within a second the later write has the higher
    # resourceVersion (opaque to clients, but etcd's revision in practice: only a tie-breaker).
    tie: int = field(default=0)
    text: str = field(default="", compare=False)


def _rv(obj: dict[str, Any]) -> int:
    value = str((obj.get("metadata") or {}).get("resourceVersion") or "0")
    return int(value) if value.isdigit() else 0


# --- pod template diff ---------------------------------------------------------------------------


def _probe(probe: dict[str, Any] | None) -> str:
    if not probe:
        return "none"
    if "httpGet" in probe:
        get = probe["httpGet"]
        how = f"http {get.get('path', '/')}:{get.get('port', '?')}"
    elif "tcpSocket" in probe:
        how = f"tcp :{probe['tcpSocket'].get('port', '?')}"
    elif "grpc" in probe:
        how = f"grpc :{probe['grpc'].get('port', '?')}"
    elif "exec" in probe:
        how = "exec " + " ".join(str(c) for c in (probe["exec"].get("command") or []))[:120]
    else:
        how = "?"
    timing = [
        f"{k}={probe[k]}"
        for k in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold")
        if k in probe
    ]
    return " ".join([how, *timing])


def _resources(res: dict[str, Any] | None) -> str:
    res = res or {}
    parts = []
    for kind in ("requests", "limits"):
        values = res.get(kind) or {}
        if values:
            parts.append(f"{kind} " + ",".join(f"{k}={v}" for k, v in sorted(values.items())))
    return " ".join(parts) or "none"


def _names(items: list[dict[str, Any]] | None) -> set[str]:
    return {str(i.get("name")) for i in items or [] if i.get("name")}


def _set_diff(label: str, old: set[str], new: set[str]) -> str | None:
    added, removed = sorted(new - old), sorted(old - new)
    if not added and not removed:
        return None
    return f"{label} " + " ".join([*(f"+{n}" for n in added), *(f"-{n}" for n in removed)])


def _container_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    if old.get("image") != new.get("image"):
        out.append(f"image {old.get('image')} -> {new.get('image')}")
    env = _set_diff("env", _names(old.get("env")), _names(new.get("env")))
    if env:
        out.append(env)
    env_from = _set_diff(
        "envFrom",
        {str((e.get("configMapRef") or e.get("secretRef") or {}).get("name")) for e in old.get("envFrom") or []},
        {str((e.get("configMapRef") or e.get("secretRef") or {}).get("name")) for e in new.get("envFrom") or []},
    )
    if env_from:
        out.append(env_from)
    if (old.get("resources") or {}) != (new.get("resources") or {}):
        out.append(f"resources {_resources(old.get('resources'))} -> {_resources(new.get('resources'))}")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if old.get(probe) != new.get(probe):
            out.append(f"{probe} {_probe(old.get(probe))} -> {_probe(new.get(probe))}")
    mounts = _set_diff(
        "volumeMounts",
        {f"{m.get('name')}:{m.get('mountPath')}" for m in old.get("volumeMounts") or []},
        {f"{m.get('name')}:{m.get('mountPath')}" for m in new.get("volumeMounts") or []},
    )
    if mounts:
        out.append(mounts)
    for key in ("command", "args"):
        if old.get(key) != new.get(key):
            out.append(f"{key} changed")  # not shown: arguments can carry credentials
    if old.get("ports") != new.get("ports"):
        ports = lambda c: ",".join(str(p.get("containerPort")) for p in c.get("ports") or []) or "none"  # noqa: E731
        out.append(f"ports {ports(old)} -> {ports(new)}")
    return out


def template_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """What differs between two pod templates, one short line per difference (no env values)."""
    old_spec, new_spec = (old or {}).get("spec") or {}, (new or {}).get("spec") or {}
    lines: list[str] = []
    for group in ("initContainers", "containers"):
        before = {c.get("name"): c for c in old_spec.get(group) or []}
        after = {c.get("name"): c for c in new_spec.get(group) or []}
        for name in sorted(after.keys() - before.keys()):
            lines.append(f"+{group[:-1]} {name} image {after[name].get('image')}")
        for name in sorted(before.keys() - after.keys()):
            lines.append(f"-{group[:-1]} {name}")
        for name in sorted(before.keys() & after.keys()):
            lines += [f"{name}: {d}" for d in _container_diff(before[name], after[name])]
    volumes = _set_diff(
        "volumes",
        {_volume(v) for v in old_spec.get("volumes") or []},
        {_volume(v) for v in new_spec.get("volumes") or []},
    )
    if volumes:
        lines.append(volumes)
    for key in (
        "serviceAccountName",
        "nodeSelector",
        "affinity",
        "tolerations",
        "priorityClassName",
        "securityContext",
        "hostNetwork",
        "dnsPolicy",
    ):
        if old_spec.get(key) != new_spec.get(key):
            lines.append(f"{key} changed")
    old_labels = ((old or {}).get("metadata") or {}).get("annotations") or {}
    new_labels = ((new or {}).get("metadata") or {}).get("annotations") or {}
    if old_labels.get("kubectl.kubernetes.io/restartedAt") != new_labels.get("kubectl.kubernetes.io/restartedAt"):
        lines.append("restarted (kubectl rollout restart)")
    return lines


def _volume(volume: dict[str, Any]) -> str:
    source = next((k for k in volume if k != "name"), "?")
    ref = volume.get(source) if isinstance(volume.get(source), dict) else {}
    target = ref.get("name") or ref.get("claimName") or ref.get("secretName") or ""  # type: ignore[union-attr]
    return f"{volume.get('name')}({source}{':' + target if target else ''})"


# --- managed fields --------------------------------------------------------------------------------


def _field_keys(fields: dict[str, Any] | None, top: str) -> list[str]:
    """Keys under `f:<top>` of a fieldsV1 set: `{"f:data": {"f:LOG_LEVEL": {}}}` → [LOG_LEVEL]."""
    inner = (fields or {}).get(f"f:{top}") or {}
    return sorted(k[2:] for k in inner if k.startswith("f:"))


def _edits(obj: dict[str, Any], since: datetime) -> list[tuple[datetime, dict[str, Any]]]:
    """Managed-field entries of `obj` written since `since` (status writes left out)."""
    out = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        when = _time(entry.get("time"))
        if when and when >= since and entry.get("subresource") != "status":
            out.append((when, entry))
    return out


def _what_fields(entry: dict[str, Any]) -> str:
    fields = entry.get("fieldsV1") or {}
    parts = []
    for top in ("data", "binaryData"):
        keys = _field_keys(fields, top)
        if keys:
            parts.append(f"{top} keys {', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}")
    rest = sorted(k[2:] for k in fields if k.startswith("f:") and k[2:] not in ("data", "binaryData", "metadata"))
    if rest:
        parts.append("fields " + ", ".join(rest))
    meta = _field_keys(fields, "metadata")
    if meta and not rest and not parts:
        parts.append("metadata " + ", ".join(meta))
    return "; ".join(parts)


# --- the tool ------------------------------------------------------------------------------------


class WhatChanged:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def _list(
        self, plural: str, namespace: str | None, notes: list[str], gate: asyncio.Semaphore
    ) -> list[dict[str, Any]]:
        try:
            async with gate:  # within the client's connection pool (10): no connection thrown away
                res = await self.api.resolve(plural)
                return await self.api.list_items(res, namespace if res.namespaced else None)
        except (KubeError, ToolInputError) as exc:
            notes.append(f"{plural}: not read ({str(exc)[:120]})")
            return []

    async def run(self, p: Params) -> str:
        namespace = p.name("namespace")
        minutes = p.integer("minutes", 60, lo=1, hi=_MAX_MINUTES) or 60
        workload = _workload(p.opt_str("workload"))
        now = datetime.now(UTC)
        since = now - timedelta(minutes=minutes)
        notes: list[str] = []
        gate = asyncio.Semaphore(8)
        lists = await asyncio.gather(
            *(self._list(plural, namespace, notes, gate) for plural in _WORKLOADS.values()),
            self._list("replicasets", namespace, notes, gate),
            self._list("controllerrevisions", namespace, notes, gate),
            *(self._list(plural, namespace, notes, gate) for plural, _ in _WATCHED),
            self._list("events", namespace, notes, gate),
            self._list("pods", namespace, notes, gate),
            self._list("nodes", None, notes, gate),
        )
        if len(notes) == len(lists):  # nothing readable: say why instead of "no changes"
            raise KubeError(f"cannot read namespace {namespace}: {notes[0]}")
        workloads = dict(zip(_WORKLOADS, lists[:3]))
        replicasets, revisions = lists[3], lists[4]
        watched = dict(zip([d for _, d in _WATCHED], lists[5 : 5 + len(_WATCHED)]))
        events, pods, nodes = lists[-3], lists[-2], lists[-1]

        if workload:
            kind, name = workload
            chosen = [w for w in workloads[kind] if w["metadata"]["name"] == name]
            if not chosen:
                raise ToolInputError(f"{kind} {name} not found in namespace {namespace}")
            workloads = {k: (chosen if k == kind else []) for k in workloads}
            template = (chosen[0].get("spec") or {}).get("template") or {}
            watched = {
                d: [o for o in items if _related(d, o, chosen[0], kind, template)] for d, items in watched.items()
            }

        changes: list[_Change] = []
        changes += _rollouts(workloads, replicasets, revisions, since)
        changes += _scaling(workloads, watched.get("hpa", []), events, since)
        changes += _modified(watched, since)
        changes += _nodes(nodes, pods, since)
        changes.sort(reverse=True)
        subject = f"{workload[0]}/{workload[1]} in namespace {namespace}" if workload else f"namespace {namespace}"
        head = f"What changed for {subject} in the last {minutes}m (newest first, UTC; now {_hhmm(now)}):"
        return _render(head, changes, notes)


def _workload(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    kind, _, name = value.partition("/")
    kind = _ALIASES.get(kind.lower(), kind.lower())
    if kind not in _WORKLOADS or not name:
        raise ToolInputError("workload must be deployment/NAME, statefulset/NAME or daemonset/NAME")
    return kind, name


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions In/NotIn/Exists/DoesNotExist) on labels."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and labels.get(key) in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def _related(display: str, obj: dict[str, Any], workload: dict[str, Any], kind: str, template: dict[str, Any]) -> bool:
    """Whether an object bears on the workload: what its pods mount or select, or target it."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    spec = template.get("spec") or {}
    name = obj["metadata"]["name"]
    if display == "configmap":
        used = {(v.get("configMap") or {}).get("name") for v in spec.get("volumes") or []}
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            used |= {(e.get("configMapRef") or {}).get("name") for e in c.get("envFrom") or []}
            used |= {((e.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name") for e in c.get("env") or []}
        return name in used
    if display == "service":
        selector = (obj.get("spec") or {}).get("selector")
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())  # type: ignore[union-attr]
    if display in ("hpa",):
        target = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        return target.get("kind", "").lower() == kind and target.get("name") == workload["metadata"]["name"]
    if display == "pdb":
        return _selects((obj.get("spec") or {}).get("selector"), labels)
    if display == "networkpolicy":
        selector = (obj.get("spec") or {}).get("podSelector")
        return selector == {} or _selects(selector, labels)
    if display == "serviceaccount":
        return name == (spec.get("serviceAccountName") or "default")
    if display == "rolebinding":
        account = spec.get("serviceAccountName") or "default"
        return any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in obj.get("subjects") or [])
    return display in ("ingress", "role")  # routing and permissions: shown, their links are not followed


def _owner(obj: dict[str, Any]) -> tuple[str, str] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind", "")).lower(), str(ref.get("name", ""))
    return None


def _rollouts(
    workloads: dict[str, list[dict[str, Any]]],
    replicasets: list[dict[str, Any]],
    revisions: list[dict[str, Any]],
    since: datetime,
) -> list[_Change]:
    out = []
    for kind, items in workloads.items():
        for workload in items:
            name = workload["metadata"]["name"]
            if kind == "deployment":
                history = [
                    (
                        int(
                            (rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", "0") or 0
                        ),
                        rs,
                        (rs.get("spec") or {}).get("template"),
                    )
                    for rs in replicasets
                    if _owner(rs) == (kind, name)
                ]
            else:
                history = [
                    (int(cr.get("revision") or 0), cr, ((cr.get("data") or {}).get("spec") or {}).get("template"))
                    for cr in revisions
                    if _owner(cr) == (kind, name)
                ]
            history.sort(key=lambda h: h[0])
            for i, (revision, obj, template) in enumerate(history):
                created = _time(obj["metadata"].get("creationTimestamp"))
                if not created or created < since:
                    continue
                what = f"{kind}/{name}"
                if i == 0:
                    text = f"{what} revision {revision} created ({obj['metadata']['name']})"
                    images = ", ".join(
                        str(c.get("image")) for c in ((template or {}).get("spec") or {}).get("containers") or []
                    )
                    text += f": images {images}" if images else ""
                else:
                    diff = template_diff(history[i - 1][2], template)
                    text = f"rollout {what} revision {history[i - 1][0]} -> {revision} ({obj['metadata']['name']})"
                    text += (
                        "".join(f"\n    {line}" for line in diff)
                        if diff
                        else "\n    (no pod template difference found)"
                    )
                if kind == "deployment" and i == len(history) - 1:
                    status = obj.get("status") or {}
                    want = (obj.get("spec") or {}).get("replicas", 0)
                    text += f"\n    ReplicaSet now {status.get('readyReplicas', 0)}/{want} ready"
                out.append(_Change(created, _rv(obj), text))
            if kind == "deployment":
                for cond in (workload.get("status") or {}).get("conditions") or []:
                    when = _time(cond.get("lastUpdateTime") or cond.get("lastTransitionTime"))
                    if cond.get("type") == "Progressing" and cond.get("status") == "False" and when and when >= since:
                        out.append(
                            _Change(
                                when,
                                _rv(workload),
                                f"{kind}/{name} rollout stuck: {cond.get('reason')}: {str(cond.get('message'))[:200]}",
                            )
                        )
    return out


def _event_time(event: dict[str, Any]) -> datetime | None:
    return _time(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )


def _scaling(
    workloads: dict[str, list[dict[str, Any]]],
    hpas: list[dict[str, Any]],
    events: list[dict[str, Any]],
    since: datetime,
) -> list[_Change]:
    out = []
    # The Deployment controller's own account of each scaling step (rollouts included).
    latest: dict[tuple[str, str], datetime] = {}
    names = {(k, w["metadata"]["name"]) for k, items in workloads.items() for w in items}
    for event in events:
        involved = event.get("involvedObject") or {}
        key = (str(involved.get("kind", "")).lower(), str(involved.get("name", "")))
        when = _event_time(event)
        if event.get("reason") != "ScalingReplicaSet" or key not in names or not when:
            continue
        latest[key] = max(when, latest.get(key, when))
        if when >= since:
            out.append(_Change(when, _rv(event), f"{key[0]}/{key[1]}: {str(event.get('message'))[:200]}"))
    for kind, items in workloads.items():
        for workload in items:
            name = workload["metadata"]["name"]
            replicas = (workload.get("spec") or {}).get("replicas")
            for entry in (workload.get("metadata") or {}).get("managedFields") or []:
                # A manager's entry lists every field it owns, not what its last write changed:
                # only a writer of the scale subresource, or of replicas alone, scaled.
                spec = set((entry.get("fieldsV1") or {}).get("f:spec") or {})
                if not (entry.get("subresource") == "scale" or spec == {"f:replicas"}):
                    continue
                # the apiserver keeps no time for writes through the scale subresource: the
                # controller's last scaling Event dates it
                when = _time(entry.get("time")) or latest.get((kind, name))
                if when and when >= since:
                    via = ", scale subresource" if entry.get("subresource") == "scale" else ""
                    out.append(
                        _Change(
                            when,
                            _rv(workload),
                            f"{kind}/{name} replicas set to {replicas} by {entry.get('manager')} "
                            f"({entry.get('operation')}{via})",
                        )
                    )
    for hpa in hpas:
        status = hpa.get("status") or {}
        when = _time(status.get("lastScaleTime"))
        if when and when >= since:
            target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
            out.append(
                _Change(
                    when,
                    _rv(hpa),
                    f"hpa/{hpa['metadata']['name']} scaled {str(target.get('kind', '')).lower()}/"
                    f"{target.get('name')} to {status.get('desiredReplicas')} (current {status.get('currentReplicas')})",
                )
            )
    return out


def _modified(watched: dict[str, list[dict[str, Any]]], since: datetime) -> list[_Change]:
    out = []
    for display, items in watched.items():
        for obj in items:
            name = f"{display}/{obj['metadata']['name']}"
            created = _time(obj["metadata"].get("creationTimestamp"))
            edits = _edits(obj, since)
            if created and created >= since:
                if (display, obj["metadata"]["name"]) in _BOOTSTRAP:
                    continue
                # the creator's entry still has the creation time unless it wrote again since
                by = ", ".join(sorted({str(e.get("manager")) for w, e in edits if w == created})) or "?"
                out.append(_Change(created, _rv(obj), f"{name} created by {by}"))
                edits = [(w, e) for w, e in edits if w > created]
            for when, entry in edits:
                detail = _what_fields(entry)
                out.append(
                    _Change(
                        when,
                        _rv(obj),
                        f"{name} modified by {entry.get('manager')} ({entry.get('operation')})"
                        f"{': ' + detail if detail else ''}",
                    )
                )
    return out


def _nodes(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], since: datetime) -> list[_Change]:
    hosting = {(pod.get("spec") or {}).get("nodeName") for pod in pods}
    out = []
    for node in nodes:
        name = node["metadata"]["name"]
        if name not in hosting:
            continue
        created = _time(node["metadata"].get("creationTimestamp"))
        if created and created >= since:
            out.append(_Change(created, 0, f"node/{name} joined (runs pods of this namespace)"))
        for cond in (node.get("status") or {}).get("conditions") or []:
            when = _time(cond.get("lastTransitionTime"))
            if cond.get("type") == "Ready" and when and when >= since and (not created or when > created):
                state = "Ready" if cond.get("status") == "True" else f"NotReady ({cond.get('reason')})"
                out.append(_Change(when, 0, f"node/{name} became {state} (runs pods of this namespace)"))
    return out


def _render(head: str, changes: list[_Change], notes: list[str]) -> str:
    lines = [head]
    used = len(head)
    shown = 0
    for change in changes:
        line = f"{_hhmm(change.when)} {change.text}"
        if used + len(line) > _BUDGET_CHARS:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    if not changes:
        lines.append("no changes found (deleted objects leave no trace here: see kubectl_events)")
    if shown < len(changes):
        lines.append(f"[... {len(changes) - shown} older changes not shown; narrow with workload or fewer minutes]")
    if notes:
        lines.append("not read: " + "; ".join(notes))
    return "\n".join(lines)
