"""MCPServers on the real control plane: the operator connects to real MCP servers (the
SDK-written test server and the third-party mcp-server-time from PyPI), reports Ready with the
tools in status, and an Investigation of the namespace calls them as `<server>__<tool>`: read-only
ones unattended, a destructive one only after a `kubectl patch` approval; a hanging tool is a
tool error and the run goes on."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from opkit import (
    create_inv,
    events_for,
    install_policy,
    patch_decisions,
    phase_is,
    transcript_messages,
    wait_inv,
    watch_phases,
)
from prometheus_client import REGISTRY

from lestrade.localcluster.build import ensure_binaries
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources.constants import GROUP, MCPSERVER_PLURAL, VERSION
from lestrade.resources.mcpserver import MCP_CREDENTIALS_LABEL

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcpserver.yaml"
TOKEN = "tok-3b1f-never-shown"


def kubectl(cluster: Any, *args: str) -> str:
    binary = ensure_binaries(["kubernetes"], quiet=True)["kubectl"]
    result = subprocess.run(
        [str(binary), *args],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def mcpserver(name: str, url: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MCPServer",
        "metadata": {"name": name},
        "spec": {"url": url, **spec},
    }


def create_server(api_client: k8s.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, namespace, MCPSERVER_PLURAL, body)


def ready(status: str) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        return conditions.get("Ready", {}).get("status") == status

    return check


def wait_server(
    api_client: k8s.ApiClient, namespace: str, name: str, until: Any, timeout: float = 90
) -> dict[str, Any]:
    return watch_phases(api_client, namespace, name, until, timeout, plural=MCPSERVER_PLURAL)[0]


def credentials(api_client: k8s.ApiClient, namespace: str, labelled: bool) -> None:
    labels = {MCP_CREDENTIALS_LABEL: "true"} if labelled else {}
    k8s.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="tsrv-token", labels=labels),
            data={"key": base64.b64encode(TOKEN.encode()).decode()},
        ),
    )


def test_mcpserver_tools_in_an_investigation_with_approval_of_the_destructive_one(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    mcp_servers: Any,
) -> None:
    install_policy(api_client, namespace)
    server = mcp_servers(require_header=f"X-Api-Key={TOKEN}")
    credentials(api_client, namespace, labelled=False)
    create_server(
        api_client,
        namespace,
        mcpserver(
            "tsrv",
            server.url,
            trustHints=True,
            timeouts={"connect": "10s", "call": "3s"},
            headers=[{"name": "X-Api-Key", "secretKeyRef": {"name": "tsrv-token", "key": "key"}}],
            tools={"exclude": ["die"]},
        ),
    )
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(id="look", name="tsrv__pods_summary", arguments={"namespace": "shop"}),
                        ToolCall(id="stuck", name="tsrv__hang", arguments={}),
                        ToolCall(id="wipe", name="tsrv__delete_everything", arguments={"target": "shop"}),
                    ]
                ),
                Step(content="The api pod crash-loops; the cleanup ran after approval."),
            ],
        )
    )
    start_operator(scenario_name, tools_mcp_refresh=2.0)

    # A Secret without the label is never used: the operator says why.
    refused = wait_server(api_client, namespace, "tsrv", ready("False"))
    ready_condition = next(c for c in refused["status"]["conditions"] if c["type"] == "Ready")
    assert ready_condition["reason"] == "SecretNotLabelled", refused["status"]
    k8s.CoreV1Api(api_client).patch_namespaced_secret(
        "tsrv-token", namespace, {"metadata": {"labels": {MCP_CREDENTIALS_LABEL: "true"}}}
    )

    kubectl(cluster, "wait", "-n", namespace, "mcpserver/tsrv", "--for=condition=Ready", "--timeout=90s")
    obj = wait_server(api_client, namespace, "tsrv", ready("True"))
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    tools = {t["name"]: t for t in status["tools"]}
    assert tools["tsrv__pods_summary"]["readOnly"] is True and tools["tsrv__pods_summary"]["approval"] == "Unattended"
    assert tools["tsrv__delete_everything"]["destructive"] is True
    assert tools["tsrv__delete_everything"]["approval"] == "Required"
    assert tools["tsrv__note"]["approval"] == "Required"
    assert "tsrv__die" not in tools and status["toolCount"] == len(tools)
    skipped = {s["tool"]: s["reason"] for s in status["skippedTools"]}
    assert "bad name!" in skipped and "die" in skipped and "schema_bomb" in skipped
    table = kubectl(cluster, "get", "mcp", "-n", namespace)
    assert "tsrv" in table and "True" in table and "Connected" in table

    create_inv(api_client, namespace, "uses-mcp")
    paused = wait_inv(
        api_client, namespace, "uses-mcp", phase_is("AwaitingApproval", "Failed", "Succeeded"), timeout=120
    )
    assert paused["status"]["phase"] == "AwaitingApproval", paused["status"]
    assert [p["toolName"] for p in paused["status"]["pendingApprovals"]] == ["tsrv__delete_everything"]
    calls = {c["id"]: c["status"] for c in paused["status"]["toolCalls"]}
    assert calls == {"look": "success", "stuck": "error", "wipe": "approval_required"}
    assert server.effects_log() == []  # nothing destructive before a person said so

    patch_decisions(api_client, namespace, "uses-mcp", {"wipe": {"approved": True}})
    done = wait_inv(api_client, namespace, "uses-mcp", phase_is("Succeeded", "Failed"), timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert server.effects_log() == ["shop"]  # ran once, with the stored arguments
    state, _ = transcript_messages(api_client, done)
    outputs = {m.get("tool_call_id"): str(m.get("content")) for m in state.messages if m["role"] == "tool"}
    assert "namespace shop: 3 pods" in outputs["look"]
    assert "no answer" in outputs["stuck"] and "tsrv" in outputs["stuck"]
    assert "deleted shop" in outputs["wipe"]

    # Metrics per server and tool (the operator runs in this process: its registry is ours;
    # the server label holds the test's own namespace, so counts start at zero).
    key = f"{namespace}/tsrv"
    calls = {
        tool: REGISTRY.get_sample_value(
            "lestrade_mcp_tool_calls_total", {"server": key, "tool": tool, "outcome": outcome}
        )
        for tool, outcome in (("pods_summary", "success"), ("hang", "error"), ("delete_everything", "success"))
    }
    assert calls == {"pods_summary": 1.0, "hang": 1.0, "delete_everything": 1.0}
    assert REGISTRY.get_sample_value("lestrade_mcp_server_up", {"server": key}) == 1.0
    assert (
        REGISTRY.get_sample_value("lestrade_mcp_tool_call_duration_seconds_count", {"server": key, "tool": "hang"})
        == 1.0
    )

    # The header's value is nowhere a person or the model could see it.
    everything = json.dumps([obj, done, [m for m in state.messages]]) + " ".join(
        e.message or "" for e in events_for(api_client, namespace, "tsrv")
    )
    assert TOKEN not in everything


def test_example_manifest_with_the_third_party_time_server(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    time_mcp_server: Any,
) -> None:
    """examples/mcpserver.yaml, pointed at mcp-server-time (PyPI) behind mcp-proxy (PyPI)."""
    manifest = yaml.safe_load(EXAMPLE.read_text())
    assert manifest["spec"]["url"].endswith("/mcp")  # the streamable-HTTP endpoint
    manifest["spec"]["url"] = time_mcp_server.url
    path = Path(cluster.kubeconfig).parent / f"mcpserver-{namespace}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="now", name="time__get_current_time", arguments={"timezone": "Asia/Tokyo"})]
                ),
                Step(content="It is a fine time in Tokyo."),
            ],
        )
    )
    start_operator(scenario_name)
    kubectl(cluster, "apply", "-n", namespace, "-f", str(path))
    kubectl(cluster, "wait", "-n", namespace, "mcpserver/time", "--for=condition=Ready", "--timeout=90s")
    create_inv(api_client, namespace, "what-time")
    done = wait_inv(
        api_client, namespace, "what-time", phase_is("Succeeded", "Failed", "AwaitingApproval"), timeout=120
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]  # vouched for: unattended
    state, _ = transcript_messages(api_client, done)
    output = next(str(m.get("content")) for m in state.messages if m["role"] == "tool")
    assert "Asia/Tokyo" in output

    # A spec change starts a round at once: the filtered tool leaves status, generation observed.
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        MCPSERVER_PLURAL,
        "time",
        {"spec": {"tools": {"exclude": ["convert_*"]}}},
        _content_type="application/merge-patch+json",
    )

    def filtered(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return status.get("observedGeneration") == obj["metadata"]["generation"] and any(
            s["tool"] == "convert_time" for s in status.get("skippedTools") or []
        )

    changed = wait_server(api_client, namespace, "time", filtered)
    assert [t["name"] for t in changed["status"]["tools"]] == ["time__get_current_time"]
    assert changed["status"]["tools"][0]["approval"] == "Unattended"


def test_job_mode_runs_get_the_mcp_tools_too(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    mcp_servers: Any,
    tmp_path: Path,
) -> None:
    """A Job's pod has no MCPServer daemons: the round lists its namespace's servers itself."""
    from opkit import UNSCHEDULABLE, jobs_of, wait_until, write_model_list

    server = mcp_servers()
    create_server(api_client, namespace, mcpserver("tsrv", server.url, trustHints=True))
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[ToolCall(id="look", name="tsrv__pods_summary", arguments={"namespace": "jobs"})]),
                Step(content="Looked."),
            ],
        )
    )
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
    start_operator(
        scenario_name,
        jobs_enabled=True,
        jobs_image="ghcr.io/lestrade/lestrade:test",
        jobs_service_account="lestrade",
        jobs_pod_template=UNSCHEDULABLE,
    )
    inv = create_inv(api_client, namespace, "mcp-in-a-job")
    (job,) = wait_until("the Job", lambda: jobs_of(api_client, namespace, inv["metadata"]["uid"]), timeout=30)
    container = job.spec.template.spec.containers[0]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "LESTRADE_MODEL_LIST": str(models)}
    env.update({e.name: e.value for e in container.env or [] if e.value is not None})
    log = tmp_path / "job.log"
    with open(log, "ab") as out:
        result = subprocess.run(
            [sys.executable, *container.command[1:]],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=180,
            check=False,
        )
    assert result.returncode == 0, log.read_text()[-3000:]
    done = wait_inv(api_client, namespace, "mcp-in-a-job", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"]
    state, _ = transcript_messages(api_client, done)
    output = next(str(m.get("content")) for m in state.messages if m["role"] == "tool")
    assert "namespace jobs: 3 pods" in output
