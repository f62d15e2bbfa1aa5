"""kill -9 of the operator while a Conversation turn thinks, runs a tool, or awaits approval (and
while the approved action runs): every turn finishes, nothing is asked or run twice, and the
settled status says exactly what the transcript says."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from convkit import all_answered, ask, conv_transcript, create_conv, patch_conv_decisions, wait_conv
from kubernetes import client as k8s
from opkit import EFFECT_LABEL, PROBE_LABEL, count_effects, phase_is, wait_until
from test_op_restart import operator_process, steps_requested

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.agent.turn import OUTCOME_UNKNOWN
from lestrade.runs.progress import run_facts


def assert_status_matches_transcript(api_client: k8s.ApiClient, obj: dict[str, Any]) -> None:
    state = conv_transcript(api_client, obj)
    status = obj["status"]
    assert status["version"] == len(state.messages) + len(state.compactions)
    for index, turn in enumerate(status["turns"]):
        start = state.turns[index]
        end = state.turns.get(index + 1, len(state.records))
        facts = run_facts(state, start, end, settled=True)
        assert (turn["steps"], turn["toolCallCount"]) == (facts.steps, facts.tool_call_count), index
        assert turn["usage"]["totalTokens"] == facts.usage.total_tokens
    last = state.turns[len(status["turns"]) - 1]
    facts = run_facts(state, last, settled=True)
    assert [(c["id"], c["status"]) for c in status["toolCalls"]] == [(c.id, c.status) for c in facts.tool_calls]
    assert all(c["status"] not in ("running", "approval_required") for c in status["toolCalls"])


def test_kill_while_a_turn_thinks_runs_a_tool_and_awaits_approval(
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
        # turn 1: a tool that is killed mid-run, then the answer
        Step(
            tool_calls=[
                ToolCall(
                    id="probe-slow", name="slow_probe", arguments={"namespace": namespace, "tag": tag, "seconds": 120}
                )
            ]
        ),
        Step(content="The probe's outcome is unknown."),
        # turn 2: the model thinks for a long time when the operator dies
        Step(content="Thought about it.", latency_ms=60_000),
        # turn 3: an action that needs approval, killed while waiting and while it runs
        Step(
            tool_calls=[
                ToolCall(
                    id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": tag, "hold_seconds": 120}
                )
            ]
        ),
        Step(content="Fix applied (outcome to be checked)."),
    ]
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    n = iter(range(1, 100))

    def start() -> Any:
        return operator_process(cluster, namespace, tmp_path, model_server, scenario_name, next(n))

    op = start()
    create_conv(api_client, namespace, "survivor", "Probe it.")
    wait_until("the tool to start", lambda: count_effects(api_client, namespace, PROBE_LABEL, tag) >= 1, timeout=90)
    op.kill()
    op = start()
    first = wait_conv(api_client, namespace, "survivor", all_answered(1))
    assert first["status"]["turns"][0]["answer"] == "The probe's outcome is unknown.", op.output()[-3000:]
    assert count_effects(api_client, namespace, PROBE_LABEL, tag) == 1

    ask(api_client, namespace, "survivor", "Think about it.")
    wait_until("the turn-2 model call", lambda: steps_requested(model_server, scenario_name)[2] >= 1, timeout=90)
    op.kill()
    steps[2] = Step(content="Thought about it.")
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    op = start()
    second = wait_conv(api_client, namespace, "survivor", all_answered(2))
    assert second["status"]["turns"][1]["answer"] == "Thought about it."

    ask(api_client, namespace, "survivor", "Fix it.")
    paused = wait_conv(api_client, namespace, "survivor", phase_is("AwaitingApproval", "Failed"))
    assert paused["status"]["phase"] == "AwaitingApproval"
    op.kill()
    patch_conv_decisions(api_client, namespace, "survivor", {"fix-1": {"approved": True}})
    op = start()
    wait_until(
        "the approved action to start", lambda: count_effects(api_client, namespace, EFFECT_LABEL, tag) >= 1, timeout=90
    )
    op.kill()
    op = start()
    try:
        done = wait_conv(api_client, namespace, "survivor", all_answered(3))
    finally:
        op.terminate()
    assert [t["phase"] for t in done["status"]["turns"]] == ["Answered"] * 3, op.output()[-3000:]
    assert done["status"]["turns"][2]["answer"] == "Fix applied (outcome to be checked)."

    # Nothing ran twice; no model step was taken twice except the one whose answer never came.
    assert count_effects(api_client, namespace, PROBE_LABEL, tag) == 1
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    assert steps_requested(model_server, scenario_name) == Counter({0: 1, 1: 1, 2: 2, 3: 1, 4: 1})
    state = conv_transcript(api_client, done)
    results = {m["tool_call_id"]: m["content"] for m in state.messages if m["role"] == "tool"}
    assert results == {"probe-slow": OUTCOME_UNKNOWN, "fix-1": OUTCOME_UNKNOWN}
    (pending,) = paused["status"]["pendingApprovals"]  # the decision is bound to this digest
    assert state.decisions == {"fix-1": {"approved": True, "reason": None, "digest": pending["digest"]}}
    assert_status_matches_transcript(api_client, done)
