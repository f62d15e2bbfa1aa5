"""`kubectl describe`-style text for Pods, Nodes, workloads, Secrets and anything else.

The model's most common question is "why is this pod unhappy", so Pods get the full kubectl
treatment — container state, last state with reason and exit code (OOMKilled, 137), restart
count, probes, conditions, events. Other kinds print their metadata, spec and status as YAML
plus events: every field is there, CRDs included, without a renderer per kind.
"""

from __future__ import annotations

from typing import Any

import yaml

from lestrade.operator.tools.kubernetes.format import (
    age,
    events_table,
    format_cpu,
    format_labels,
    format_memory,
    parse_time,
    quantity,
    render_table,
)
from lestrade.operator.tools.kubernetes.sanitize import LAST_APPLIED, clean_object, secret_key_sizes

__all__ = ["describe_object", "describe_pod", "describe_node", "describe_secret", "to_yaml"]


def to_yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=200, allow_unicode=True)


def _time(value: str | None) -> str:
    parsed = parse_time(value)
    return parsed.strftime("%a, %d %b %Y %H:%M:%S %z") if parsed else "<unknown>"


class _Out:
    """Collects `Key:  value` lines with kubectl-like alignment."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def kv(self, key: str, value: Any, indent: int = 0, width: int = 18) -> None:
        text = "<none>" if value is None or value == "" else str(value)
        label = (key + ":").ljust(width)
        if not label.endswith(" "):
            label += " "  # a long key still gets a separator
        self.lines.append(f"{' ' * indent}{label}{text}")

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def mapping(self, key: str, values: dict[str, Any] | None, indent: int = 0, width: int = 18) -> None:
        """`Labels:  a=b` then continuation lines aligned under the first value."""
        items = [f"{k}={v}" if key != "Annotations" else f"{k}: {v}" for k, v in sorted((values or {}).items())]
        if not items:
            self.kv(key, "<none>", indent, width)
            return
        self.kv(key, items[0], indent, width)
        for item in items[1:]:
            self.lines.append(" " * (indent + width) + item)

    def text(self) -> str:
        return "\n".join(self.lines)


def _annotations(meta: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in (meta.get("annotations") or {}).items():
        if k == LAST_APPLIED:
            out[k] = "<omitted>"
        else:
            text = str(v).replace("\n", " ")
            out[k] = text if len(text) <= 300 else text[:297] + "..."
    return out


def _header(out: _Out, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    out.kv("Name", meta.get("name"))
    if meta.get("namespace"):
        out.kv("Namespace", meta.get("namespace"))
    out.mapping("Labels", meta.get("labels"))
    out.mapping("Annotations", _annotations(meta))
    out.kv("CreationTimestamp", _time(meta.get("creationTimestamp")))
    owners = meta.get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    if controller:
        out.kv("Controlled By", f"{controller.get('kind')}/{controller.get('name')}")
    if meta.get("deletionTimestamp"):
        out.kv("Terminating", f"since {_time(meta['deletionTimestamp'])}")


def _events(out: _Out, events: list[dict[str, Any]] | None) -> None:
    if events is None:
        return
    if not events:
        out.kv("Events", "<none>")
        return
    out.line("Events:")
    out.line(events_table(events, with_object=False, limit=40, indent="  "))


# --- pods ---------------------------------------------------------------------------------------


def _state(out: _Out, label: str, state: dict[str, Any] | None, indent: int) -> None:
    if not state:
        if label == "State":
            out.kv(label, "Waiting", indent)
        return
    name, detail = next(iter(state.items()))
    detail = detail or {}
    out.kv(label, name.capitalize(), indent)
    if detail.get("reason"):
        out.kv("Reason", detail["reason"], indent + 2, 16)
    if detail.get("message"):
        out.kv("Message", str(detail["message"]).strip()[:500], indent + 2, 16)
    if "exitCode" in detail:
        out.kv("Exit Code", detail["exitCode"], indent + 2, 16)
    if detail.get("signal"):
        out.kv("Signal", detail["signal"], indent + 2, 16)
    if detail.get("startedAt"):
        out.kv("Started", _time(detail["startedAt"]), indent + 2, 16)
    if detail.get("finishedAt"):
        out.kv("Finished", _time(detail["finishedAt"]), indent + 2, 16)


def _probe(probe: dict[str, Any] | None) -> str | None:
    if not probe:
        return None
    if "httpGet" in probe:
        h = probe["httpGet"]
        what = f"http-get {h.get('scheme', 'HTTP').lower()}://{h.get('host', '')}:{h.get('port')}{h.get('path', '')}"
    elif "tcpSocket" in probe:
        what = f"tcp-socket :{probe['tcpSocket'].get('port')}"
    elif "exec" in probe:
        what = "exec " + str((probe["exec"] or {}).get("command"))
    elif "grpc" in probe:
        what = f"grpc <pod>:{probe['grpc'].get('port')}"
    else:
        what = "unknown"
    return (
        f"{what} delay={probe.get('initialDelaySeconds', 0)}s timeout={probe.get('timeoutSeconds', 1)}s "
        f"period={probe.get('periodSeconds', 10)}s #success={probe.get('successThreshold', 1)} "
        f"#failure={probe.get('failureThreshold', 3)}"
    )


def _env_value(env: dict[str, Any]) -> str:
    if "valueFrom" not in env:
        return str(env.get("value", ""))
    source = env["valueFrom"] or {}
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        return f"<set to the key '{ref.get('key')}' in secret '{ref.get('name')}'>  Optional: {str(ref.get('optional', False)).lower()}"
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        return f"<set to the key '{ref.get('key')}' of config map '{ref.get('name')}'>  Optional: {str(ref.get('optional', False)).lower()}"
    if "fieldRef" in source:
        return f"({source['fieldRef'].get('apiVersion', 'v1')}:{source['fieldRef'].get('fieldPath')})"
    if "resourceFieldRef" in source:
        return f"{source['resourceFieldRef'].get('resource')}"
    return "<set from a source>"


def _container(out: _Out, c: dict[str, Any], status: dict[str, Any] | None) -> None:
    status = status or {}
    out.line(f"  {c.get('name')}:")
    ind = 4
    if status.get("containerID"):
        out.kv("Container ID", status["containerID"], ind)
    out.kv("Image", c.get("image"), ind)
    ports = c.get("ports") or []
    if ports:
        out.kv(
            "Ports" if len(ports) > 1 else "Port",
            ", ".join(f"{p.get('containerPort')}/{p.get('protocol', 'TCP')}" for p in ports),
            ind,
        )
    for key, label in (("command", "Command"), ("args", "Args")):
        if c.get(key):
            out.line(f"{' ' * ind}{label}:")
            for part in c[key][:30]:
                out.line(f"{' ' * (ind + 2)}{str(part)[:500]}")
    _state(out, "State", status.get("state"), ind)
    if status.get("lastState"):
        _state(out, "Last State", status.get("lastState"), ind)
    out.kv("Ready", str(bool(status.get("ready"))).capitalize() if status else "False", ind)
    out.kv("Restart Count", status.get("restartCount", 0), ind)
    resources = c.get("resources") or {}
    for key, label in (("limits", "Limits"), ("requests", "Requests")):
        if resources.get(key):
            out.line(f"{' ' * ind}{label}:")
            for name, value in resources[key].items():
                out.kv(name, value, ind + 2, 10)
    for key, label in (("livenessProbe", "Liveness"), ("readinessProbe", "Readiness"), ("startupProbe", "Startup")):
        probe = _probe(c.get(key))
        if probe:
            out.kv(label, probe, ind)
    env_from = c.get("envFrom") or []
    if env_from:
        out.line(f"{' ' * ind}Environment Variables from:")
        for source in env_from:
            kind = "Secret" if "secretRef" in source else "ConfigMap"
            ref = source.get("secretRef") or source.get("configMapRef") or {}
            out.line(f"{' ' * (ind + 2)}{ref.get('name')}  {kind}  Optional: {str(ref.get('optional', False)).lower()}")
    env = c.get("env") or []
    if env:
        out.line(f"{' ' * ind}Environment:")
        for e in env[:100]:
            out.kv(e.get("name", ""), _env_value(e), ind + 2, max(12, len(e.get("name", "")) + 3))
    else:
        out.kv("Environment", "<none>", ind)
    mounts = c.get("volumeMounts") or []
    if mounts:
        out.line(f"{' ' * ind}Mounts:")
        for m in mounts:
            mode = "ro" if m.get("readOnly") else "rw"
            out.line(f"{' ' * (ind + 2)}{m.get('mountPath')} from {m.get('name')} ({mode})")


def _volume(v: dict[str, Any]) -> str:
    for key, value in v.items():
        if key == "name":
            continue
        value = value or {}
        if key == "secret":
            return f"Secret (a volume populated by a Secret)  SecretName: {value.get('secretName')}"
        if key == "configMap":
            return f"ConfigMap (a volume populated by a ConfigMap)  Name: {value.get('name')}"
        if key == "persistentVolumeClaim":
            return f"PersistentVolumeClaim  ClaimName: {value.get('claimName')}  ReadOnly: {str(value.get('readOnly', False)).lower()}"
        if key == "emptyDir":
            return f"EmptyDir  Medium: {value.get('medium', '')}  SizeLimit: {value.get('sizeLimit', '<unset>')}"
        if key == "projected":
            return "Projected (a volume that contains injected data from multiple sources)"
        if key == "hostPath":
            return f"HostPath  Path: {value.get('path')}"
        return key
    return "<unknown>"


def describe_pod(pod: dict[str, Any], events: list[dict[str, Any]] | None) -> str:
    pod = clean_object(pod)
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
    out = _Out()
    out.kv("Name", meta.get("name"))
    out.kv("Namespace", meta.get("namespace"))
    out.kv("Priority", spec.get("priority", 0))
    out.kv("Service Account", spec.get("serviceAccountName", "default"))
    node = spec.get("nodeName")
    out.kv("Node", f"{node}/{status.get('hostIP', '')}" if node else "<none>")
    out.kv("Start Time", _time(status.get("startTime")) if status.get("startTime") else "<none>")
    out.mapping("Labels", meta.get("labels"))
    out.mapping("Annotations", _annotations(meta))
    phase = status.get("phase", "Unknown")
    if meta.get("deletionTimestamp"):
        phase = f"Terminating (lasts {age(meta['deletionTimestamp'])})"
    out.kv("Status", phase)
    if status.get("reason"):
        out.kv("Reason", status["reason"])
    if status.get("message"):
        out.kv("Message", status["message"])
    out.kv("IP", status.get("podIP"))
    owners = meta.get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), None)
    if controller:
        out.kv("Controlled By", f"{controller.get('kind')}/{controller.get('name')}")
    for key, status_key, label in (
        ("initContainers", "initContainerStatuses", "Init Containers"),
        ("containers", "containerStatuses", "Containers"),
    ):
        containers = spec.get(key) or []
        if not containers:
            continue
        statuses = {s.get("name"): s for s in status.get(status_key) or []}
        out.line(f"{label}:")
        for c in containers:
            _container(out, c, statuses.get(c.get("name")))
    conditions = status.get("conditions") or []
    if conditions:
        out.line("Conditions:")
        width = max(len("Type"), *(len(c.get("type", "")) for c in conditions)) + 2
        out.line(f"  {'Type'.ljust(width)}Status")
        for c in conditions:
            reason = f"  ({c['reason']})" if c.get("reason") and c.get("status") != "True" else ""
            out.line(f"  {c.get('type', '').ljust(width)}{c.get('status')}{reason}")
    volumes = spec.get("volumes") or []
    if volumes:
        out.line("Volumes:")
        for v in volumes:
            out.line(f"  {v.get('name')}:  {_volume(v)}")
    out.kv("QoS Class", status.get("qosClass"))
    out.kv("Node-Selectors", format_labels(spec.get("nodeSelector")) if spec.get("nodeSelector") else "<none>")
    tolerations = spec.get("tolerations") or []
    out.kv("Tolerations", ", ".join(_toleration(t) for t in tolerations) or "<none>")
    _events(out, events)
    return out.text()


def _toleration(t: dict[str, Any]) -> str:
    text = t.get("key", "") or ""
    if t.get("operator") == "Exists" and not text:
        text = "op=Exists"
    elif t.get("value"):
        text += f"={t['value']}"
    if t.get("effect"):
        text += f":{t['effect']}"
    if t.get("tolerationSeconds") is not None:
        text += f" for {t['tolerationSeconds']}s"
    return text


# --- nodes --------------------------------------------------------------------------------------


def describe_node(node: dict[str, Any], pods: list[dict[str, Any]], events: list[dict[str, Any]] | None) -> str:
    node = clean_object(node)
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    out = _Out()
    out.kv("Name", meta.get("name"))
    labels = meta.get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    out.kv("Roles", ",".join(r for r in roles if r) or "<none>")
    out.mapping("Labels", labels)
    out.mapping("Annotations", _annotations(meta))
    out.kv("CreationTimestamp", _time(meta.get("creationTimestamp")))
    taints = [
        f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
        for t in spec.get("taints") or []
    ]
    out.kv("Taints", ", ".join(taints) or "<none>")
    out.kv("Unschedulable", str(bool(spec.get("unschedulable"))).lower())
    conditions = status.get("conditions") or []
    if conditions:
        out.line("Conditions:")
        rows = [
            [c.get("type"), c.get("status"), age(c.get("lastHeartbeatTime")), c.get("reason"), c.get("message")]
            for c in conditions
        ]
        table = render_table(["Type", "Status", "LastHeartbeat", "Reason", "Message"], rows)
        out.line("\n".join("  " + line for line in table.splitlines()))
    addresses = status.get("addresses") or []
    if addresses:
        out.line("Addresses:")
        for a in addresses:
            out.kv(a.get("type", ""), a.get("address"), 2, 14)
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    for label, values in (("Capacity", capacity), ("Allocatable", allocatable)):
        if values:
            out.line(f"{label}:")
            for k, v in values.items():
                out.kv(k, v, 2, 20)
    info = status.get("nodeInfo") or {}
    if info:
        out.line("System Info:")
        for key in (
            "kernelVersion",
            "osImage",
            "containerRuntimeVersion",
            "kubeletVersion",
            "architecture",
            "operatingSystem",
        ):
            if info.get(key):
                out.kv(key[0].upper() + key[1:], info[key], 2, 26)
    if spec.get("podCIDR"):
        out.kv("PodCIDR", spec["podCIDR"])
    active = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    out.line(f"Non-terminated Pods:  ({len(active)} in total)")
    cpu_req = cpu_lim = mem_req = mem_lim = quantity(0)
    rows = []
    for p in active:
        totals = _pod_resources(p)
        cpu_req += totals[0]
        cpu_lim += totals[1]
        mem_req += totals[2]
        mem_lim += totals[3]
        rows.append(
            [
                p["metadata"].get("namespace"),
                p["metadata"].get("name"),
                format_cpu(totals[0]),
                format_cpu(totals[1]),
                format_memory(totals[2]),
                format_memory(totals[3]),
                age(p["metadata"].get("creationTimestamp")),
            ]
        )
    if rows:
        table = render_table(
            ["Namespace", "Name", "CPU Requests", "CPU Limits", "Memory Requests", "Memory Limits", "Age"],
            rows,
            max_rows=60,
        )
        out.line("\n".join("  " + line for line in table.splitlines()))
    out.line("Allocated resources:")
    alloc_cpu, alloc_mem = quantity(allocatable.get("cpu", 0)), quantity(allocatable.get("memory", 0))
    out.line(
        f"  cpu     {format_cpu(cpu_req)} ({_pct(cpu_req, alloc_cpu)})  limits {format_cpu(cpu_lim)} ({_pct(cpu_lim, alloc_cpu)})"
    )
    out.line(
        f"  memory  {format_memory(mem_req)} ({_pct(mem_req, alloc_mem)})  limits {format_memory(mem_lim)} ({_pct(mem_lim, alloc_mem)})"
    )
    _events(out, events)
    return out.text()


def _pct(part: Any, whole: Any) -> str:
    return f"{int(part * 100 / whole)}%" if whole else "0%"


def _pod_resources(pod: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    cpu_req = cpu_lim = mem_req = mem_lim = quantity(0)
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        cpu_req += quantity(req.get("cpu", 0))
        mem_req += quantity(req.get("memory", 0))
        cpu_lim += quantity(lim.get("cpu", 0))
        mem_lim += quantity(lim.get("memory", 0))
    return cpu_req, cpu_lim, mem_req, mem_lim


# --- secrets and everything else -------------------------------------------------------------


def describe_secret(secret: dict[str, Any], events: list[dict[str, Any]] | None) -> str:
    """Names, type and data-key sizes only: a Secret's values never leave this function."""
    meta = secret.get("metadata") or {}
    out = _Out()
    out.kv("Name", meta.get("name"))
    out.kv("Namespace", meta.get("namespace"))
    out.mapping("Labels", meta.get("labels"))
    out.mapping("Annotations", _annotations(meta))
    out.line()
    out.kv("Type", secret.get("type"))
    out.line()
    out.line("Data (values are never shown)")
    out.line("====")
    sizes = secret_key_sizes(secret)
    if not sizes:
        out.line("<no data>")
    for key, size in sizes.items():
        out.line(f"{key}  {size} bytes")
    _events(out, events)
    return out.text()


def _workload_summary(obj: dict[str, Any], out: _Out) -> None:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    kind = obj.get("kind")
    selector = (spec.get("selector") or {}).get("matchLabels")
    if selector:
        out.kv("Selector", format_labels(selector))
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        desired = spec.get("replicas", 1)
        out.kv(
            "Replicas",
            f"{desired} desired | {status.get('updatedReplicas', 0)} updated | "
            f"{status.get('replicas', 0)} total | {status.get('readyReplicas', 0)} ready | "
            f"{status.get('availableReplicas', 0)} available | "
            f"{status.get('unavailableReplicas', 0)} unavailable",
        )
    if kind == "DaemonSet":
        out.kv("Desired Nodes", status.get("desiredNumberScheduled", 0))
        out.kv("Current Nodes", status.get("currentNumberScheduled", 0))
        out.kv("Ready Nodes", status.get("numberReady", 0))
        out.kv("Unavailable", status.get("numberUnavailable", 0))
    strategy = (spec.get("strategy") or spec.get("updateStrategy") or {}).get("type")
    if strategy:
        out.kv("StrategyType", strategy)
    template = spec.get("template") or {}
    if template:
        out.line("Pod Template:")
        tmeta = template.get("metadata") or {}
        out.mapping("Labels", tmeta.get("labels"), 2, 16)
        tspec = template.get("spec") or {}
        if tspec.get("serviceAccountName"):
            out.kv("Service Account", tspec["serviceAccountName"], 2, 16)
        out.line("  Containers:")
        for c in tspec.get("containers") or []:
            _container_template(out, c)
    conditions = status.get("conditions") or []
    if conditions:
        out.line("Conditions:")
        rows = [[c.get("type"), c.get("status"), c.get("reason"), (c.get("message") or "")[:200]] for c in conditions]
        table = render_table(["Type", "Status", "Reason", "Message"], rows)
        out.line("\n".join("  " + line for line in table.splitlines()))


def _container_template(out: _Out, c: dict[str, Any]) -> None:
    out.line(f"   {c.get('name')}:")
    out.kv("Image", c.get("image"), 4)
    res = c.get("resources") or {}
    for key, label in (("limits", "Limits"), ("requests", "Requests")):
        if res.get(key):
            out.kv(label, ", ".join(f"{k}={v}" for k, v in res[key].items()), 4)
    for key, label in (("livenessProbe", "Liveness"), ("readinessProbe", "Readiness")):
        probe = _probe(c.get(key))
        if probe:
            out.kv(label, probe, 4)
    env = c.get("env") or []
    if env:
        out.line("    Environment:")
        for e in env[:50]:
            out.kv(e.get("name", ""), _env_value(e), 6, max(12, len(e.get("name", "")) + 3))
    for m in c.get("volumeMounts") or []:
        out.line(f"    Mount: {m.get('mountPath')} from {m.get('name')} ({'ro' if m.get('readOnly') else 'rw'})")


_WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}


def describe_object(obj: dict[str, Any], events: list[dict[str, Any]] | None, *, extra: str = "") -> str:
    """Any kind: header, a kubectl-like summary for workloads, the rest as YAML, then events."""
    if obj.get("kind") == "Secret":
        return describe_secret(obj, events)
    obj = clean_object(obj)
    out = _Out()
    _header(out, obj)
    rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    if obj.get("kind") in _WORKLOADS:
        _workload_summary(obj, out)
        rest = {}  # the summary above covers spec and status
    if extra:
        out.line(extra)
    for key, value in rest.items():
        out.line(f"{key[0].upper() + key[1:]}:")
        body = to_yaml(value).rstrip()
        if len(body) > 12_000:
            body = body[:12_000] + "\n[... truncated]"
        out.line("\n".join("  " + line for line in body.splitlines()))
    _events(out, events)
    return out.text()
