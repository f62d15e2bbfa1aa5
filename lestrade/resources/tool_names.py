"""The names of the operator's built-in tools: a contract between the operator and the API.

The API refuses a client's frontend tool that would shadow a built-in tool (reference 000:
400) before anything is created, but it must not import the operator; so the names live here,
and a test keeps this set a superset of what the operator's default registry offers with every
toolset switched on. The operator still refuses a collision when a turn starts (the backstop).
"""

from __future__ import annotations

__all__ = ["BUILTIN_TOOL_NAMES"]

BUILTIN_TOOL_NAMES: frozenset[str] = frozenset(
    {
        "TodoWrite",
        "alertmanager_alerts",
        "alertmanager_silences",
        "bash",
        "fetch_runbook",
        "kubectl_delete_pod",
        "kubectl_describe",
        "kubectl_events",
        "kubectl_find_resource",
        "kubectl_get_by_kind_in_cluster",
        "kubectl_get_by_kind_in_namespace",
        "kubectl_get_by_name",
        "kubectl_get_yaml",
        "kubectl_logs",
        "kubectl_previous_logs",
        "kubectl_rollout_restart",
        "kubectl_scale",
        "kubectl_top_nodes",
        "kubectl_top_pods",
        "prometheus_alerts",
        "prometheus_instant_query",
        "prometheus_labels",
        "prometheus_range_query",
        "prometheus_rules",
        "prometheus_series",
        "search_findings",
        "what_changed",
    }
)
