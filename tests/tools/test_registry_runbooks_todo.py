"""The default registry's shape and budget, file runbooks, and the TodoWrite plan."""

from __future__ import annotations

import json
from pathlib import Path

import tiktoken
from kubernetes.client import ApiClient, Configuration

from lestrade.operator.tools import Tool, default_registry, runbooks_toolset, todo_toolset

READ_ONLY_KUBERNETES = {
    "kubectl_describe",
    "kubectl_get_by_name",
    "kubectl_get_by_kind_in_namespace",
    "kubectl_get_by_kind_in_cluster",
    "kubectl_find_resource",
    "kubectl_get_yaml",
    "kubectl_events",
    "kubectl_logs",
    "kubectl_previous_logs",
    "kubectl_top_pods",
    "kubectl_top_nodes",
    "what_changed",
}
WRITE_TOOLS = {"kubectl_delete_pod", "kubectl_rollout_restart", "kubectl_scale"}
PROMETHEUS = {
    "prometheus_instant_query",
    "prometheus_range_query",
    "prometheus_series",
    "prometheus_labels",
    "prometheus_alerts",
    "prometheus_rules",
}


def _offline_client() -> ApiClient:
    config = Configuration()
    config.host = "https://127.0.0.1:1"  # never contacted: building a registry makes no requests
    return ApiClient(config)


def test_default_registry_tools_and_schema_budget() -> None:
    registry = default_registry(_offline_client(), prometheus_url="http://127.0.0.1:9")
    names = {t.name for t in registry.enabled_tools()}
    assert names == READ_ONLY_KUBERNETES | PROMETHEUS | {"bash", "fetch_runbook", "TodoWrite", "search_findings"}
    assert all(isinstance(t, Tool) for t in registry.enabled_tools())
    encoding = tiktoken.get_encoding("cl100k_base")
    # Sent with every request: #23 cut it from 2,438, then offered the task list, past findings,
    # Prometheus, alerting and bash only once opened (their schemas and instructions).
    tokens = len(encoding.encode(json.dumps(registry.schemas())))
    assert tokens <= 1300, tokens
    offered = {s["function"]["name"] for s in registry.schemas()}
    assert offered == READ_ONLY_KUBERNETES | {"fetch_runbook", "open_toolset"}
    everything = registry.schemas({ts.name for ts in registry.deferred()})
    assert {s["function"]["name"] for s in everything} == names
    assert len(encoding.encode(json.dumps(everything))) <= 2050
    assert len(encoding.encode(registry.instructions())) <= 250


def test_instructions_name_only_tools_the_run_is_offered() -> None:
    """The toolsets' instructions (the system prompt's, and a deferred toolset's answer to
    open_toolset) never send the model to a tool it does not have (they named
    alertmanager_alerts to runs without an Alertmanager)."""
    import re

    tool_name = re.compile(
        r"\b(?:kubectl|prometheus|alertmanager)_[a-z_]+\b|\b(?:fetch_runbook|search_findings|what_changed|TodoWrite)\b"
    )
    for kwargs in (
        {},
        {"prometheus_url": "http://127.0.0.1:9"},
        {"alertmanager_url": "http://127.0.0.1:9"},
        {"prometheus_url": "http://127.0.0.1:9", "alertmanager_url": "http://127.0.0.1:9"},
    ):
        registry = default_registry(_offline_client(), **kwargs)
        names = {t.name for t in registry.enabled_tools()}
        named = set(tool_name.findall("\n".join(ts.instructions for ts in registry.toolsets if ts.enabled)))
        assert named <= names, (kwargs, named - names)
        if "alertmanager_url" in kwargs:
            assert {"alertmanager_alerts", "alertmanager_silences"} <= named


def test_optional_toolsets() -> None:
    plain = {t.name for t in default_registry(_offline_client(), enable_bash=False).enabled_tools()}
    assert not plain & (PROMETHEUS | WRITE_TOOLS | {"bash"})
    full = default_registry(_offline_client(), enable_write_tools=True)
    write_tools = [full.get(n) for n in WRITE_TOOLS]
    assert all(write_tools)
    for tool in write_tools:
        assert tool.needs_approval({}) is True
        assert tool.needs_approval({"namespace": "a", "name": "b", "kind": "deployment", "replicas": 1}) is True
    assert all(not full.get(n).needs_approval({"kind": "pod", "name": "x"}) for n in READ_ONLY_KUBERNETES)


def test_describe_lines_read_like_kubectl() -> None:
    registry = default_registry(_offline_client(), enable_write_tools=True)
    assert (
        registry.get("kubectl_describe").describe({"kind": "pod", "name": "web-1", "namespace": "shop"})
        == "kubectl describe pod web-1 -n shop"
    )
    assert (
        registry.get("kubectl_rollout_restart").describe({"kind": "deployment", "name": "web", "namespace": "shop"})
        == "kubectl rollout restart deployment/web -n shop"
    )
    assert registry.get("bash").describe({"command": "kubectl get pods"}) == "kubectl get pods"


async def test_runbooks_from_folder_and_builtin(tmp_path: Path) -> None:
    (tmp_path / "disk-full.md").write_text("# Node disk full\n\nUse when: DiskPressure on a node.\n\n1. Check.\n")
    toolset = runbooks_toolset([tmp_path])
    assert "disk-full: Node disk full" in toolset.instructions
    assert "crashloop-oom" in toolset.instructions
    fetch = toolset.tools[0]
    listing = await fetch.run({})
    assert "disk-full" in listing.data and "image-pull" in listing.data and "pending-pods" in listing.data
    got = await fetch.run({"name": "disk-full"})
    assert got.status == "success" and "DiskPressure" in got.data
    builtin = await fetch.run({"name": "crashloop-oom.md"})
    assert "OOMKilled" in builtin.data and "kubectl_previous_logs" in builtin.data
    missing = await fetch.run({"name": "nope"})
    assert missing.status == "error" and "pending-pods" in (missing.error or "")


async def test_todo_write_keeps_state_per_toolset() -> None:
    first = todo_toolset().tools[0]
    out = await first.run(
        {
            "todos": [
                {"id": "1", "content": "Describe the pod", "status": "completed"},
                {"id": "2", "content": "Read previous logs", "status": "in_progress"},
                {"id": "3", "content": "Check memory limit", "status": "pending"},
            ]
        }
    )
    assert out.data.splitlines() == [
        "Task list (1/3 completed):",
        "[x] 1. Describe the pod",
        "[~] 2. Read previous logs",
        "[ ] 3. Check memory limit",
    ]
    bad = await first.run({"todos": [{"id": "1", "content": "x", "status": "done"}]})
    assert bad.status == "error" and "in_progress" in (bad.error or "")
    other = todo_toolset().tools[0]
    fresh = await other.run({"todos": []})
    assert fresh.data == "Task list is empty."


def test_the_api_knows_every_built_in_tool_name() -> None:
    """lestrade.resources.tool_names (what the API refuses as a frontend tool name) covers the
    default registry with every toolset on."""
    from kubernetes import client as k8s

    from lestrade.operator.tools.registry import default_registry
    from lestrade.resources.tool_names import BUILTIN_TOOL_NAMES

    registry = default_registry(
        k8s.ApiClient(), prometheus_url="http://127.0.0.1:9", enable_write_tools=True, enable_bash=True
    )
    names = {tool.name for toolset in registry.toolsets for tool in toolset.tools}
    assert names and names <= BUILTIN_TOOL_NAMES, sorted(names - BUILTIN_TOOL_NAMES)
