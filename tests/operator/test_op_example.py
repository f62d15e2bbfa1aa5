"""examples/crashloop.yaml with the demo model: `kubectl apply` shows the phases and a sensible
analysis (what `make run` offers on a fresh machine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from opkit import phase_is, resource_version, transcript_messages, wait_until, watch_phases

from lestrade.config import ModelList, demo_model
from lestrade.localcluster.build import ensure_binaries
from lestrade.modelserver import demo_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "crashloop.yaml"


def kubectl(cluster: Any, *args: str) -> str:
    binary = ensure_binaries(["kubernetes"], quiet=True)["kubectl"]
    result = subprocess.run(
        [str(binary), *args],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_crashloop_example_with_the_demo_model(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    # The demo model, answering after half a second as a real model would after longer: a run
    # that ends within the status interval (0.3 s) shows only its end to a watcher.
    model_server.add_scenario(demo_scenario().model_copy(update={"name": scenario_name, "latency_ms": 500}))
    demo = demo_model(model_server.base_url)
    demo.settings["model"] = f"openai/{scenario_name}"
    start_operator(models=ModelList({demo.name: demo}, demo.name), tools=None)
    since = resource_version(api_client, namespace)
    kubectl(cluster, "apply", "-n", namespace, "-f", str(EXAMPLE))

    def crashlooping() -> bool:
        pods = k8s.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector="app=inventory-api").items
        return any(
            s.state.waiting and s.state.waiting.reason == "CrashLoopBackOff"
            for p in pods
            for s in p.status.container_statuses or []
        )

    wait_until("the example's pod to crash-loop", crashlooping, timeout=60)
    final, seen = watch_phases(
        api_client, namespace, "inventory-api-crashloop", phase_is("Succeeded", "Failed"), timeout=120, since=since
    )
    phases = [p for p in ((o.get("status") or {}).get("phase") for o in seen) if p]
    # As the README's `kubectl get inv -w` comment says: Running, then Succeeded (Pending only
    # while a run waits for a free slot).
    assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == ["Running", "Succeeded"]

    status = final["status"]
    assert "demo model" in status["message"]
    assert "Demo model" in status["analysis"]
    assert "inventory-api" in status["analysis"] and "CrashLoopBackOff" in status["analysis"]
    # the crashed container's last log line, declared in the example's annotations
    assert "FATAL: open /etc/inventory/config.yaml" in status["analysis"]
    assert status["sections"] and all(status["sections"].values())
    names = [c["name"] for c in status["toolCalls"]]
    assert names[0] == "kubectl_find_resource" and "kubectl_describe" in names
    # grounded findings: each conclusion cites calls of this run, and status shows them
    ids = {c["id"] for c in status["toolCalls"]}
    assert status["findings"] and all(f["grounded"] for f in status["findings"]), status["findings"]
    assert {e for f in status["findings"] for e in f["evidence"]} <= ids
    assert status["groundedFindings"] == f"{len(status['findings'])}/{len(status['findings'])}"
    assert any(f["section"] == "Conclusions and Possible Root Causes" for f in status["findings"])
    state, _ = transcript_messages(api_client, final)
    assert any("CrashLoopBackOff" in str(m.get("content")) for m in state.messages if m["role"] == "tool")

    table = kubectl(cluster, "get", "inv", "-n", namespace)
    assert "inventory-api-crashloop" in table and "Succeeded" in table


def test_conversation_example_with_kubectl_and_the_demo_model(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    # The demo model, answering after half a second as a real model would after longer: a run
    # that ends within the status interval (0.3 s) shows only its end to a watcher.
    model_server.add_scenario(demo_scenario().model_copy(update={"name": scenario_name, "latency_ms": 500}))
    demo = demo_model(model_server.base_url)
    demo.settings["model"] = f"openai/{scenario_name}"
    start_operator(models=ModelList({demo.name: demo}, demo.name), tools=None)
    kubectl(cluster, "apply", "-n", namespace, "-f", str(EXAMPLE))
    kubectl(cluster, "apply", "-n", namespace, "-f", str(EXAMPLE.parent / "conversation.yaml"))
    name = "ask-about-the-cluster"
    kubectl(cluster, "wait", "-n", namespace, f"conv/{name}", "--for=condition=Answered", "--timeout=120s")
    first = kubectl(cluster, "get", "conv", name, "-n", namespace, "-o", "jsonpath={.status.turns[0].answer}")
    assert "Demo model" in first and "inventory-api" in first

    kubectl(
        cluster,
        "patch",
        "conv",
        name,
        "-n",
        namespace,
        "--type",
        "json",
        "-p",
        '[{"op":"add","path":"/spec/turns/-","value":{"ask":"And what about pod inventory-api restarts?"}}]',
    )

    def two_answered() -> bool:
        out = kubectl(cluster, "get", "conv", name, "-n", namespace, "-o", "jsonpath={.status.answeredTurns}")
        return out == "2"

    wait_until("the second answer", two_answered, timeout=120, interval=0.5)
    table = kubectl(cluster, "get", "conv", name, "-n", namespace)
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "PHASE", "ASKED", "ANSWERED", "VERSION"]
    assert row.split()[:4] == [name, "Answered", "2", "2"]
    listed = kubectl(cluster, "get", "lestrade", "-n", namespace)
    assert (
        f"conversation.lestrade.dev/{name}" in listed and "investigation.lestrade.dev/inventory-api-crashloop" in listed
    )
