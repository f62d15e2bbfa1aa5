"""Write actions: delete a pod, restart a workload, scale. Off unless enabled; always approved.

These are the remediations a person most often does by hand after an investigation. Each call
needs approval every time (`needs_approval` is always true) and the toolset is disabled by
default, so a model never even sees them unless the operator is configured to offer them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes.client import ApiClient

from lestrade.operator.tools.base import Tool, Toolset
from lestrade.operator.tools.common import FunctionTool, Params, ToolInputError, schema
from lestrade.operator.tools.kubernetes.api import KubeApi

__all__ = ["write_toolset", "RESTARTED_AT"]

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
_RESTARTABLE = {"deployment": "deployments", "statefulset": "statefulsets", "daemonset": "daemonsets"}
_SCALABLE = {"deployment": "deployments", "statefulset": "statefulsets", "replicaset": "replicasets"}
_ALIASES = {
    "deploy": "deployment",
    "deployments": "deployment",
    "sts": "statefulset",
    "statefulsets": "statefulset",
    "ds": "daemonset",
    "daemonsets": "daemonset",
    "rs": "replicaset",
    "replicasets": "replicaset",
}


def _always(_: Params) -> bool:
    return True


def _workload_kind(p: Params, allowed: dict[str, str]) -> str:
    kind = p.required("kind").lower()
    kind = _ALIASES.get(kind, kind)
    if kind not in allowed:
        raise ToolInputError(f"kind must be one of: {', '.join(allowed)}")
    return kind


def write_toolset(api_client: ApiClient, *, enabled: bool = False, namespaces: list[str] | None = None) -> Toolset:
    """Write tools over `api_client`; `enabled=False` keeps them out of the model's tool list.
    `namespaces`: the run's scope (None: any namespace). The write client is the operator's, so
    this check is what keeps an approved write inside the scope of the run that asked for it."""
    api = KubeApi(api_client)

    def _namespace(p: Params) -> str:
        namespace = p.name("namespace")
        if namespaces is not None and namespace not in namespaces:
            raise ToolInputError(f"namespace {namespace} is outside this run's scope ({', '.join(namespaces)})")
        return namespace  # type: ignore[return-value]

    async def delete_pod(p: Params) -> str:
        namespace, name = _namespace(p), p.name("name")
        pods = await api.resolve("pods")
        await api.delete(pods.path(namespace, name))
        return f'pod "{name}" deleted from namespace {namespace}'

    async def rollout_restart(p: Params) -> str:
        kind = _workload_kind(p, _RESTARTABLE)
        namespace, name = _namespace(p), p.name("name")
        res = await api.resolve(f"{_RESTARTABLE[kind]}.apps")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}}}
        await api.patch(res.path(namespace, name), body, content_type="application/strategic-merge-patch+json")
        return f"{kind}.apps/{name} restarted (pod template annotated {RESTARTED_AT}={now})"

    async def scale(p: Params) -> str:
        kind = _workload_kind(p, _SCALABLE)
        namespace, name = _namespace(p), p.name("name")
        replicas = p.integer("replicas", lo=0)
        if replicas is None:
            raise ToolInputError("missing required parameter 'replicas'")
        res = await api.resolve(f"{_SCALABLE[kind]}.apps")
        result = await api.patch(res.path(namespace, name, "scale"), {"spec": {"replicas": replicas}})
        return f"{kind}.apps/{name} scaled to {result.get('spec', {}).get('replicas', replicas)} replicas"

    ns_name = {"namespace": {"type": "string"}, "name": {"type": "string"}}
    tools: list[Tool] = [
        FunctionTool(
            "kubectl_delete_pod",
            "Delete a pod (its controller recreates it). Needs approval.",
            schema(["namespace", "name"], **ns_name),
            delete_pod,
            lambda p: f"kubectl delete pod {p.opt_str('name')} -n {p.opt_str('namespace')}",
            approval=_always,
        ),
        FunctionTool(
            "kubectl_rollout_restart",
            "Restart a deployment, statefulset or daemonset. Needs approval.",
            schema(["kind", "namespace", "name"], kind={"type": "string", "enum": list(_RESTARTABLE)}, **ns_name),
            rollout_restart,
            lambda p: f"kubectl rollout restart {p.opt_str('kind')}/{p.opt_str('name')} -n {p.opt_str('namespace')}",
            approval=_always,
        ),
        FunctionTool(
            "kubectl_scale",
            "Scale a deployment, statefulset or replicaset. Needs approval.",
            schema(
                ["kind", "namespace", "name", "replicas"],
                kind={"type": "string", "enum": list(_SCALABLE)},
                replicas={"type": "integer", "minimum": 0},
                **ns_name,
            ),
            scale,
            lambda p: (
                f"kubectl scale {p.opt_str('kind')}/{p.opt_str('name')} --replicas={p.opt_str('replicas')} -n {p.opt_str('namespace')}"
            ),
            approval=_always,
        ),
    ]
    return Toolset(
        name="kubernetes_write",
        tools=tools,
        enabled=enabled,
        instructions="Write tools change the cluster and always wait for a human's approval; "
        "propose them only after the cause is clear.",
    )
