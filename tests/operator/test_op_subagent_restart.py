"""kill -9 of the operator while a harness session's subagent works and waits for a relay: the
restarted operator does not resume the subagent, but tells its parent precisely what became of
it (stopped by the restart, after what, with what it had written), records its end, and
withdraws the relay it was waiting for, so the session neither waits for it nor runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from convkit import all_answered, conv_transcript, create_conv, get_conv, wait_conv
from kubernetes import client as k8s
from opkit import EFFECT_LABEL, count_effects, wait_until
from test_op_restart import operator_process

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.agent.turn import OUTCOME_UNKNOWN
from lestrade.runs.transcript import RecordType

PARTIAL = "So far: web-1 was OOMKilled three times; raising its memory limit should fix it."


@pytest.mark.timeout(600)  # two operator processes start, each importing litellm, on 2 shared cores
def test_a_subagent_running_at_a_restart_is_reported_to_its_parent_with_its_partial_result(
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
                Step(tool_calls=[ToolCall(id="spawn-1", name="agent", arguments={"task": "CHILD-TASK: find out"})]),
                Step(content="The subagent was stopped; here is what it found."),
            ],
            rules=[
                {  # the subagent: writes what it found, then asks for an action (a relay)
                    "when": {"last_user_contains": "CHILD-TASK"},
                    "respond": {
                        "content": PARTIAL,
                        "tool_calls": [
                            {"id": "child-fix", "name": "apply_fix", "arguments": {"namespace": namespace, "tag": tag}}
                        ],
                    },
                }
            ],
        )
    )
    op = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 1)
    create_conv(
        api_client,
        namespace,
        "parent",
        "Investigate web-1.",
        harness={"permissions": {"allowlist": [{"tool": "agent"}]}},
    )

    def relayed() -> bool:
        pending = (get_conv(api_client, namespace, "parent").get("status") or {}).get("pendingApprovals") or []
        return [p.get("toolCallId") for p in pending] == ["child-fix"]

    try:
        wait_until("the subagent's relay in status", relayed, timeout=150)
    except TimeoutError as exc:
        status = get_conv(api_client, namespace, "parent").get("status")
        raise AssertionError(f"{exc}: status {status}; operator: {op.output()[-3000:]}") from exc
    op.kill()  # the subagent waits for its relay inside the run: it dies with the process
    requests_before = len(model_server.requests(scenario_name))
    op = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 2)
    try:
        done = wait_conv(api_client, namespace, "parent", all_answered(1))
    finally:
        op.terminate()
    assert done["status"]["turns"][0]["phase"] == "Answered", op.output()[-3000:]
    assert done["status"]["turns"][0]["answer"] == "The subagent was stopped; here is what it found."
    assert not done["status"].get("pendingApprovals")

    # The parent's next model call got the account of its subagent, not "outcome unknown".
    asked = model_server.requests(scenario_name)[requests_before:]
    assert len(asked) == 1  # the subagent was not resumed (it would have asked again)
    told = [m for m in asked[0]["messages"] if m.get("role") == "tool" and m.get("tool_call_id") == "spawn-1"]
    assert len(told) == 1 and OUTCOME_UNKNOWN not in told[0]["content"]
    text = told[0]["content"]
    assert "stopped by an operator restart after 1 model call(s)" in text, text
    assert "approval request(s) child-fix were withdrawn" in text and PARTIAL in text

    state = conv_transcript(api_client, done)
    ends = [r for r in state.records if r.get("t") == RecordType.AGENT and r.get("event") == "end"]
    assert [(r["agentId"], r["reason"]) for r in ends] == [("agent-spawn-1", "stopped")]
    assert state.decisions["child-fix"]["approved"] is False
    assert "stopped by an operator restart" in state.decisions["child-fix"]["reason"]
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 0  # the withdrawn action never ran
