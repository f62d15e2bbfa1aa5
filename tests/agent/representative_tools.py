"""A stand-in for the default toolset's *schemas*: 16 tools shaped like the real ones.

The first-call budget (system prompt + tool definitions <= 5,000 tokens) must hold for the
default toolset; until `lestrade.operator.tools.default_registry()` exists, this set, with
names, descriptions and parameters as verbose as HolmesGPT's, is what the budget is checked on.
"""

from __future__ import annotations

from typing import Any

from lestrade.operator.tools.base import ToolOutput, ToolRegistry, Toolset

__all__ = ["representative_registry"]

_NS = {"type": "string", "description": "Kubernetes namespace"}
_KIND = {"type": "string", "description": "Resource kind, e.g. pod, deployment, node"}
_NAME = {"type": "string", "description": "Resource name"}


def _obj(required: list[str], **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


_SPECS: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        "kubernetes",
        "kubectl_describe",
        "Describe a Kubernetes resource (like `kubectl describe`): spec, status, conditions and recent events.",
        _obj(["kind", "name"], kind=_KIND, name=_NAME, namespace=_NS),
    ),
    (
        "kubernetes",
        "kubectl_get_by_name",
        "Get one resource by kind and name, as a kubectl-like wide table row with labels.",
        _obj(["kind", "name"], kind=_KIND, name=_NAME, namespace=_NS),
    ),
    (
        "kubernetes",
        "kubectl_get_by_kind_in_namespace",
        "List all resources of a kind in a namespace (kubectl get KIND -n NS -o wide).",
        _obj(["kind", "namespace"], kind=_KIND, namespace=_NS),
    ),
    (
        "kubernetes",
        "kubectl_get_by_kind_in_cluster",
        "List all resources of a kind in every namespace.",
        _obj(["kind"], kind=_KIND),
    ),
    (
        "kubernetes",
        "kubectl_find_resource",
        "Find resources of a kind whose name, labels or namespace contain a keyword.",
        _obj(
            ["kind", "keyword"],
            kind=_KIND,
            keyword={"type": "string", "description": "Substring to search for"},
        ),
    ),
    (
        "kubernetes",
        "kubectl_events",
        "Events of one resource, newest last.",
        _obj(["kind", "name"], kind=_KIND, name=_NAME, namespace=_NS),
    ),
    (
        "kubernetes",
        "kubectl_logs",
        "Logs of a pod's container (current instance).",
        _obj(
            ["name", "namespace"],
            name=_NAME,
            namespace=_NS,
            container={"type": "string", "description": "Container name; default: the only one"},
            tail={"type": "integer", "description": "Number of lines from the end"},
        ),
    ),
    (
        "kubernetes",
        "kubectl_previous_logs",
        "Logs of the previous (crashed) instance of a pod's container.",
        _obj(
            ["name", "namespace"],
            name=_NAME,
            namespace=_NS,
            container={"type": "string", "description": "Container name"},
        ),
    ),
    (
        "kubernetes",
        "kubectl_logs_grep",
        "Lines of a pod's logs that match a regular expression.",
        _obj(
            ["name", "namespace", "pattern"],
            name=_NAME,
            namespace=_NS,
            pattern={"type": "string", "description": "Python regular expression"},
        ),
    ),
    (
        "kubernetes",
        "kubectl_top_pods",
        "CPU and memory use of the pods in a namespace.",
        _obj([], namespace=_NS),
    ),
    ("kubernetes", "kubectl_top_nodes", "CPU and memory use of every node.", _obj([])),
    (
        "prometheus",
        "execute_prometheus_instant_query",
        "Run a PromQL instant query and return the result vector.",
        _obj(
            ["query"],
            query={"type": "string", "description": "PromQL"},
            description={"type": "string", "description": "What the query shows"},
        ),
    ),
    (
        "prometheus",
        "execute_prometheus_range_query",
        "Run a PromQL range query over a time window.",
        _obj(
            ["query", "start", "end"],
            query={"type": "string", "description": "PromQL"},
            start={"type": "string", "description": "RFC3339 or relative (-1h)"},
            end={"type": "string", "description": "RFC3339 or now"},
            step={"type": "string", "description": "Resolution, e.g. 30s"},
        ),
    ),
    ("prometheus", "list_prometheus_rules", "List the alerting and recording rules.", _obj([])),
    (
        "bash",
        "bash",
        "Run a read-only shell pipeline of allowed commands (kubectl get/describe, "
        "grep, jq, ...). Other commands need approval.",
        _obj(["command"], command={"type": "string", "description": "The command line"}),
    ),
    (
        "todo",
        "TodoWrite",
        "Write the investigation plan as a list of tasks with status.",
        _obj(
            ["todos"],
            todos={
                "type": "array",
                "items": _obj(
                    ["content", "status"],
                    content={"type": "string"},
                    status={"type": "string", "enum": ["pending", "in_progress", "completed"]},
                ),
            },
        ),
    ),
]

_INSTRUCTIONS = {
    "kubernetes": "Kubernetes tools read the cluster through its API. Prefer kubectl_describe "
    "and kubectl_events first; use previous logs for crash loops.",
    "prometheus": "Prometheus tools run PromQL. Use range queries for trends; keep windows short.",
    "bash": "bash runs only allow-listed read-only commands without approval.",
}


class _SchemaTool:
    def __init__(self, name: str, description: str, parameters: dict[str, Any]) -> None:
        self.name, self.description, self.parameters = name, description, parameters

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        return self.name

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        return ToolOutput("no_data")


def representative_registry() -> ToolRegistry:
    toolsets: dict[str, Toolset] = {}
    for toolset, name, description, parameters in _SPECS:
        ts = toolsets.setdefault(toolset, Toolset(toolset, [], _INSTRUCTIONS.get(toolset, "")))
        ts.tools.append(_SchemaTool(name, description, parameters))
    return ToolRegistry(list(toolsets.values()))
