"""kill -9 of the operator process at the worst moments, then a restart: every Investigation
finishes, no model turn is lost or taken twice, and no action runs a second time."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    PROBE_LABEL,
    OperatorProcess,
    count_effects,
    create_inv,
    events_for,
    patch_decisions,
    patch_status,
    phase_is,
    transcript_messages,
    wait_inv,
    wait_until,
    write_model_list,
)

from lestrade.kube import Kube
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.agent.turn import OUTCOME_UNKNOWN
from lestrade.runs.progress import run_facts
from lestrade.runs.transcript import Transcript


def steps_requested(model_server: Any, scenario: str) -> Counter[int]:
    """How many times the model was asked for each step (step = assistant messages so far)."""
    return Counter(
        sum(1 for m in body["messages"] if m.get("role") == "assistant") for body in model_server.requests(scenario)
    )


def assistant_turns(state: Any) -> list[str]:
    return [str(m.get("tool_calls") or m.get("content")) for m in state.messages if m["role"] == "assistant"]


def assert_status_matches_transcript(api_client: k8s.ApiClient, done: dict[str, Any]) -> None:
    """A settled Investigation's status says what its transcript says (counts, calls, usage)."""
    state, _ = transcript_messages(api_client, done)
    facts = run_facts(state, settled=True)
    status = done["status"]
    assert (status["steps"], status["toolCallCount"]) == (facts.steps, facts.tool_call_count)
    assert [(c["id"], c["status"]) for c in status["toolCalls"]] == [(c.id, c.status) for c in facts.tool_calls]
    assert status["usage"]["totalTokens"] == facts.usage.total_tokens
    assert status["pendingApprovals"] == []


def operator_process(
    cluster: Any, namespace: str, tmp_path: Path, model_server: Any, scenario: str, n: int
) -> OperatorProcess:
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario)
    return OperatorProcess(cluster, namespace, models, tmp_path / f"operator-{n}.log").start()


def test_kill_while_the_model_thinks(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    tag = scenario_name
    steps = [
        Step(tool_calls=[ToolCall(id="probe-1", name="slow_probe", arguments={"namespace": namespace, "tag": tag})]),
        Step(content="All good.", latency_ms=60_000),
    ]
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    first = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 1)
    create_inv(api_client, namespace, "thinking")
    wait_until("the second model call", lambda: steps_requested(model_server, scenario_name)[1] >= 1, timeout=90)
    first.kill()

    # The same script answers at once now; the restarted operator must ask for step 1 again
    # (its answer never arrived) and never for step 0 (its answer is in the transcript).
    steps[1] = Step(content="All good.")
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    second = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 2)
    try:
        done = wait_inv(api_client, namespace, "thinking", phase_is("Succeeded", "Failed"), timeout=90)
    finally:
        second.terminate()
    assert done["status"]["phase"] == "Succeeded", second.output()[-3000:]
    assert steps_requested(model_server, scenario_name) == Counter({0: 1, 1: 2})
    assert count_effects(api_client, namespace, PROBE_LABEL, tag) == 1
    state, _ = transcript_messages(api_client, done)
    assert len(assistant_turns(state)) == 2
    assert [m["role"] for m in state.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert done["status"]["steps"] == 2
    assert_status_matches_transcript(api_client, done)


def test_kill_while_a_tool_runs(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="probe-slow",
                            name="slow_probe",
                            arguments={"namespace": namespace, "tag": tag, "seconds": 120},
                        )
                    ]
                ),
                Step(content="The probe's outcome is unknown; nothing else to do."),
            ],
        )
    )
    first = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 1)
    create_inv(api_client, namespace, "tooling")
    wait_until("the tool to start", lambda: count_effects(api_client, namespace, PROBE_LABEL, tag) >= 1, timeout=90)
    first.kill()

    second = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 2)
    try:
        done = wait_inv(api_client, namespace, "tooling", phase_is("Succeeded", "Failed"), timeout=90)
    finally:
        second.terminate()
    assert done["status"]["phase"] == "Succeeded", second.output()[-3000:]
    # Started before the kill, so never started again; the model hears "outcome unknown".
    assert count_effects(api_client, namespace, PROBE_LABEL, tag) == 1
    state, _ = transcript_messages(api_client, done)
    (result,) = [m for m in state.messages if m["role"] == "tool"]
    assert result["tool_call_id"] == "probe-slow" and result["content"] == OUTCOME_UNKNOWN
    assert steps_requested(model_server, scenario_name) == Counter({0: 1, 1: 1})
    assert len(assistant_turns(state)) == 2
    assert_status_matches_transcript(api_client, done)


def test_kill_while_awaiting_approval_and_while_the_approved_action_runs(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="fix-1",
                            name="apply_fix",
                            arguments={"namespace": namespace, "tag": tag, "hold_seconds": 120},
                        )
                    ]
                ),
                Step(content="Fix applied (outcome to be checked)."),
            ],
        )
    )
    first = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 1)
    create_inv(api_client, namespace, "approving")
    paused = wait_inv(api_client, namespace, "approving", phase_is("AwaitingApproval", "Failed"), timeout=90)
    assert paused["status"]["phase"] == "AwaitingApproval"
    first.kill()

    # Approved while no operator runs; the next one picks the decision up.
    patch_decisions(api_client, namespace, "approving", {"fix-1": {"approved": True}})
    second = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 2)
    wait_until(
        "the approved action to start", lambda: count_effects(api_client, namespace, EFFECT_LABEL, tag) >= 1, timeout=90
    )
    second.kill()

    third = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 3)
    try:
        done = wait_inv(api_client, namespace, "approving", phase_is("Succeeded", "Failed"), timeout=90)
    finally:
        third.terminate()
    assert done["status"]["phase"] == "Succeeded", third.output()[-3000:]
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    state, _ = transcript_messages(api_client, done)
    (result,) = [m for m in state.messages if m["role"] == "tool"]
    assert result["content"] == OUTCOME_UNKNOWN
    # The approval is not silently lost: status and a Warning Event say what to check, and
    # how to approve the action again.
    message = done["status"]["message"]
    assert "may not have taken effect: fix-1 (apply fix" in message
    assert f"kubectl patch inv approving -n {namespace} --type merge" in message
    assert any(
        e.reason == "ApprovedActionOutcomeUnknown" and e.type == "Warning"
        for e in events_for(api_client, namespace, "approving")
    )
    # The decision was bound to the digest the pending call showed in status.
    (pending,) = paused["status"]["pendingApprovals"]
    assert state.decisions == {"fix-1": {"approved": True, "reason": None, "digest": pending["digest"]}}
    assert steps_requested(model_server, scenario_name) == Counter({0: 1, 1: 1})
    assert_status_matches_transcript(api_client, done)


def test_sigterm_stops_the_operator_cleanly(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="ok")]))
    proc = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 1)
    create_inv(api_client, namespace, "quick")
    wait_inv(api_client, namespace, "quick", phase_is("Succeeded"), timeout=90)
    assert proc.terminate(timeout=30) == 0
    assert "Operator is stopping" in proc.output()


@pytest.mark.parametrize("running_stored", [True, False], ids=["running-stored", "no-status-yet"])
async def test_an_answer_stored_before_a_crash_is_not_asked_for_again(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    running_stored: bool,
) -> None:
    # The state a crash leaves between storing the final answer and writing Succeeded: with
    # Running stored, or (an Investigation's Running rides with its next status write, here the
    # end) with no status at all — its next attempt must still read the transcript.
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="a second answer")]))
    inv = create_inv(api_client, namespace, "answered", sections={"Cause": "why"})
    if running_stored:
        patch_status(api_client, namespace, "answered", phase="Running", startTime="2026-01-01T00:00:00Z", steps=1)
    meta = inv["metadata"]
    kube = Kube(api_client)
    transcript = Transcript(
        kube,
        namespace,
        {"apiVersion": inv["apiVersion"], "kind": "Investigation", "name": meta["name"], "uid": meta["uid"]},
    )
    for message in [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": '{"Cause": "the stored answer"}'},
    ]:
        transcript.append_message(message)
    await transcript.sync()
    await kube.aclose()

    start_operator(scenario_name, runs_default_timeout=10**9)
    done = await asyncio.to_thread(wait_inv, api_client, namespace, "answered", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["sections"] == {"Cause": "the stored answer"}
    assert model_server.requests(scenario_name) == []
