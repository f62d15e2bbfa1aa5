"""Timeout, delete while running, the concurrency limit and ttlSecondsAfterFinished."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.transcript import TRANSCRIPT_LABEL
from opkit import (
    GROUP,
    PLURAL,
    PROBE_LABEL,
    VERSION,
    count_effects,
    create_inv,
    wait_event,
    get_inv,
    phase_is,
    wait_inv,
    wait_until,
    watch_phases,
)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_timeout_fails_the_run(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="late", latency_ms=30_000)]))
    start_operator(scenario_name)
    create_inv(api_client, namespace, "slowpoke", timeout="2s")
    done = wait_inv(api_client, namespace, "slowpoke", phase_is("Succeeded", "Failed"), timeout=30)
    cond = conditions(done)["Succeeded"]
    assert done["status"]["phase"] == "Failed"
    assert cond["status"] == "False" and cond["reason"] == "Timeout"
    assert "timeout (2s)" in cond["message"]
    wait_event(api_client, namespace, "slowpoke", "Timeout")


def test_timeout_also_runs_while_waiting_for_approval(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[
        Step(tool_calls=[ToolCall(id="fix", name="apply_fix", arguments={"namespace": namespace, "tag": "t"})]),
        Step(content="never reached"),
    ]))
    start_operator(scenario_name)
    create_inv(api_client, namespace, "unattended", timeout="3s")
    paused = wait_inv(api_client, namespace, "unattended", phase_is("AwaitingApproval", "Failed"))
    assert paused["status"]["phase"] == "AwaitingApproval"
    done = wait_inv(api_client, namespace, "unattended", phase_is("Failed", "Succeeded"), timeout=30)
    assert conditions(done)["Succeeded"]["reason"] == "Timeout"
    assert conditions(done)["AwaitingApproval"]["status"] == "False"
    assert done["status"]["pendingApprovals"] == []


def test_deleting_a_running_investigation_stops_its_run(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str,
    start_operator: Any,
) -> None:
    tag = scenario_name
    model_server.add_scenario(Scenario(name=scenario_name, steps=[
        Step(tool_calls=[ToolCall(id="p", name="slow_probe", arguments={"namespace": namespace, "tag": tag, "seconds": 300})]),
        Step(content="never reached"),
    ]))
    start_operator(scenario_name)
    inv = create_inv(api_client, namespace, "doomed")
    wait_until("the tool to start", lambda: count_effects(api_client, namespace, PROBE_LABEL, tag) >= 1)
    assert get_inv(api_client, namespace, "doomed")["metadata"]["finalizers"] == ["lestrade.dev/run"]
    k8s.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "doomed")
    # The object only disappears once the run has stopped (the finalizer waits for it).
    wait_inv(api_client, namespace, "doomed", lambda o: bool(o.get("deleted")), timeout=20)
    assert len(model_server.requests(scenario_name)) == 1
    # The transcript goes with it (owner references).
    core = k8s.CoreV1Api(api_client)
    wait_until("the transcript to be garbage-collected", lambda: not core.list_namespaced_config_map(
        namespace, label_selector=f"{TRANSCRIPT_LABEL}={inv['metadata']['uid']}").items, timeout=120)


def test_concurrency_limit_queues_the_rest_in_pending(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="done", latency_ms=1500)]))
    start_operator(scenario_name, concurrency=2)
    names = [f"q-{i}" for i in range(5)]
    custom = k8s.CustomObjectsApi(api_client)
    version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
    phases: dict[str, str] = {}
    most_running = 0
    queued: set[str] = set()
    finished = threading.Event()

    def observe() -> None:
        nonlocal most_running
        stream = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, namespace,
                                      PLURAL, resource_version=version, timeout_seconds=90)
        for event in stream:
            obj = event["object"]
            status = obj.get("status") or {}
            phases[obj["metadata"]["name"]] = status.get("phase", "")
            if conditions(obj).get("Succeeded", {}).get("reason") == "WaitingForSlot":
                queued.add(obj["metadata"]["name"])
            most_running = max(most_running, sum(1 for p in phases.values() if p == "Running"))
            if len(phases) == len(names) and all(p in ("Succeeded", "Failed") for p in phases.values()):
                finished.set()
                return

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    for name in names:
        create_inv(api_client, namespace, name)
    assert finished.wait(90), phases
    assert set(phases.values()) == {"Succeeded"}
    assert most_running == 2
    assert len(queued) >= 3
    queued_obj = next(iter(queued))
    wait_event(api_client, namespace, queued_obj, "Queued")


def test_ttl_seconds_after_finished_deletes_the_investigation(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="done")]))
    start_operator(scenario_name)
    create_inv(api_client, namespace, "keeper")
    create_inv(api_client, namespace, "fleeting", ttlSecondsAfterFinished=2)
    wait_inv(api_client, namespace, "keeper", phase_is("Succeeded"))
    final, seen = watch_phases(api_client, namespace, "fleeting", lambda o: bool(o.get("deleted")), timeout=30)
    assert any((o.get("status") or {}).get("phase") == "Succeeded" for o in seen)
    # The one without a TTL is kept.
    assert get_inv(api_client, namespace, "keeper")["status"]["phase"] == "Succeeded"
