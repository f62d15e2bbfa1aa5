"""Timeout, delete while running, the concurrency limit and ttlSecondsAfterFinished."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from opkit import (
    GROUP,
    PLURAL,
    PROBE_LABEL,
    UNSCHEDULABLE,
    VERSION,
    count_effects,
    create_inv,
    get_inv,
    jobs_of,
    phase_is,
    resource_version,
    transcript_messages,
    wait_event,
    wait_inv,
    wait_until,
    watch_phases,
)

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.base.metrics import RUNS_ACTIVE
from lestrade.runs.transcript import TRANSCRIPT_LABEL


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_timeout_fails_the_run(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
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
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[ToolCall(id="fix", name="apply_fix", arguments={"namespace": namespace, "tag": "t"})]),
                Step(content="never reached"),
            ],
        )
    )
    start_operator(scenario_name)
    # startTime has whole seconds, so a timeout of N s leaves N-1 to N s; 8 s leave room to
    # reach the approval pause on a loaded machine.
    create_inv(api_client, namespace, "unattended", timeout="8s")
    paused = wait_inv(api_client, namespace, "unattended", phase_is("AwaitingApproval", "Failed"))
    assert paused["status"]["phase"] == "AwaitingApproval"
    done = wait_inv(api_client, namespace, "unattended", phase_is("Failed", "Succeeded"), timeout=30)
    assert conditions(done)["Succeeded"]["reason"] == "Timeout"
    assert conditions(done)["AwaitingApproval"]["status"] == "False"
    assert done["status"]["pendingApprovals"] == []
    # Settled from the transcript: the call that waited is over, and the end is on record.
    assert [(c["id"], c["status"]) for c in done["status"]["toolCalls"]] == [("fix", "error")]
    state, _ = transcript_messages(api_client, done)
    assert state.records[-1]["t"] == "error" and state.records[-1]["reason"] == "Timeout"


PROMPTLY = 8.0
"""Seconds within which a deleted running Investigation is gone: a run stops at once; without
that the finalizer would wait for Kopf's fallback (the daemon's 10 s cancellation_timeout)."""


@pytest.mark.parametrize("job_mode", [False, True], ids=["in-process", "job-mode"])
def test_deleting_a_running_investigation_stops_its_run(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    job_mode: bool,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="p", name="slow_probe", arguments={"namespace": namespace, "tag": tag, "seconds": 300}
                        )
                    ]
                ),
                Step(content="never reached"),
            ],
        )
    )
    if job_mode:
        start_operator(
            scenario_name,
            jobs_enabled=True,
            jobs_image="ghcr.io/lestrade/lestrade:test",
            jobs_service_account="lestrade",
            jobs_pod_template=UNSCHEDULABLE,
        )
    else:
        start_operator(scenario_name)
    inv = create_inv(api_client, namespace, "doomed")
    uid = inv["metadata"]["uid"]
    if job_mode:  # the operator waits for the round's Job (its pod never runs here)
        wait_until("the Job", lambda: jobs_of(api_client, namespace, uid), timeout=30)
    else:
        wait_until("the tool to start", lambda: count_effects(api_client, namespace, PROBE_LABEL, tag) >= 1)
    # In Job mode a finalizer holds the object until the run's Jobs are deleted; in-process the
    # watch stops the run, so no finalizer (and none of its two patches per run) is needed.
    finalizers = get_inv(api_client, namespace, "doomed")["metadata"].get("finalizers")
    assert finalizers == (["lestrade.dev/run"] if job_mode else None)
    if not job_mode:
        assert RUNS_ACTIVE.labels("Investigation")._value.get() == 1

    since = resource_version(api_client, namespace)  # the watch below replays from here
    asked = time.monotonic()
    k8s.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "doomed")
    _, seen = watch_phases(api_client, namespace, "doomed", lambda o: bool(o.get("deleted")), timeout=20, since=since)
    took = time.monotonic() - asked
    assert took < PROMPTLY, f"deletion took {took:.1f}s"
    if not job_mode:
        # The run stops promptly too (its slow tool was cancelled, its slot is free).
        wait_until("the run to stop", lambda: RUNS_ACTIVE.labels("Investigation")._value.get() == 0, timeout=PROMPTLY)
    if job_mode:
        # Marked for deletion first: the finalizer held the object until the run had stopped.
        assert any(o["metadata"].get("deletionTimestamp") for o in seen if not o.get("deleted"))
        # The operator deleted the Job itself (garbage collection would take much longer).
        assert jobs_of(api_client, namespace, uid) == []
        assert model_server.requests(scenario_name) == []
        return
    assert len(model_server.requests(scenario_name)) == 1
    # The transcript goes with it (owner references).
    core = k8s.CoreV1Api(api_client)
    wait_until(
        "the transcript to be garbage-collected",
        lambda: not core.list_namespaced_config_map(namespace, label_selector=f"{TRANSCRIPT_LABEL}={uid}").items,
        timeout=120,
    )


def test_concurrency_limit_queues_the_rest_in_pending(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="done", latency_ms=1500)]))
    start_operator(scenario_name, runs_concurrency=2)
    names = [f"q-{i}" for i in range(5)]
    custom = k8s.CustomObjectsApi(api_client)
    version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
    phases: dict[str, str] = {}
    most_running = 0
    queued: set[str] = set()
    finished = threading.Event()

    def observe() -> None:
        nonlocal most_running
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            resource_version=version,
            timeout_seconds=90,
        )
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
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="done")]))
    start_operator(scenario_name)
    since = resource_version(api_client, namespace)
    create_inv(api_client, namespace, "keeper")
    create_inv(api_client, namespace, "fleeting", ttlSecondsAfterFinished=2)
    wait_inv(api_client, namespace, "keeper", phase_is("Succeeded"))
    final, seen = watch_phases(
        api_client, namespace, "fleeting", lambda o: bool(o.get("deleted")), timeout=30, since=since
    )
    deleted_by = time.time()  # the deletion happened before the watch reported it
    succeeded = [o for o in seen if (o.get("status") or {}).get("phase") == "Succeeded"]
    assert succeeded
    # It lived until its TTL had passed (counted from completionTime), not merely until it finished.
    completed = datetime.fromisoformat(succeeded[0]["status"]["completionTime"].replace("Z", "+00:00"))
    assert deleted_by >= completed.timestamp() + 2
    # The one without a TTL is kept.
    assert get_inv(api_client, namespace, "keeper")["status"]["phase"] == "Succeeded"
