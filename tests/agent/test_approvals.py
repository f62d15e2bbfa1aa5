"""Approvals (pause, approve, deny, disabled) and resuming after a crash."""

from __future__ import annotations

import json

from agent_support import FakeTool, collect, final, of_kind, registry, transcript

from lestrade.operator.agent.turn import OUTCOME_UNKNOWN


def _tools() -> tuple[FakeTool, FakeTool]:
    safe = FakeTool("get", lambda p: f"pods in {p['x']}")
    danger = FakeTool("delete", lambda p: f"deleted {p['x']}", approval=lambda p: p["x"] != "dry-run")
    return safe, danger


def _pausing_scenario(harness) -> None:
    harness.scenario(
        steps=[
            {
                "tool_calls": [
                    {"name": "get", "arguments": {"x": "shop"}},
                    {"name": "delete", "arguments": {"x": "pod/web-1"}},
                ]
            },
            {"content": "result: {{ tool_output('delete') }}"},
        ]
    )


async def _pause(harness, safe: FakeTool, danger: FakeTool):
    _pausing_scenario(harness)
    agent = harness.agent(registry(safe, danger))
    start = agent.initial_messages("clean up web-1")
    events = await collect(agent.run(start))
    return agent, events, transcript(events, start)


async def test_a_call_needing_approval_pauses_after_the_safe_calls_ran(harness) -> None:
    safe, danger = _tools()
    _, events, messages = await _pause(harness, safe, danger)
    paused = final(events)
    assert paused.kind == "approval_needed"
    (pending,) = paused.pending
    assert (pending.tool_name, pending.params) == ("delete", {"x": "pod/web-1"})
    assert pending.description == "delete {'x': 'pod/web-1'}"
    assert [e.name for e in of_kind(events, "tool_started")] == ["get"]
    assert [(r.name, r.status) for r in of_kind(events, "tool_result")] == [
        ("get", "success"),
        ("delete", "approval_required"),
    ]
    assert safe.calls == [{"x": "shop"}] and danger.calls == []
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert len(harness.requests()) == 1


async def test_approving_runs_the_stored_call_exactly(harness) -> None:
    safe, danger = _tools()
    agent, events, messages = await _pause(harness, safe, danger)
    (pending,) = final(events).pending
    call_id = pending.tool_call_id
    # The script would now ask differently; the stored call must run, not a new one.
    harness.scenario(
        steps=[
            {"tool_calls": [{"name": "delete", "arguments": {"x": "other"}}]},
            {"content": "result: {{ tool_output('delete') }}"},
        ]
    )
    resumed = await collect(agent.run(messages, decisions={call_id: (True, None, pending.digest)}))
    assert final(resumed).text == "result: deleted pod/web-1"
    assert danger.calls == [{"x": "pod/web-1"}]
    assert [e.call_id for e in of_kind(resumed, "tool_started")] == [call_id]
    assert len(harness.requests()) == 2  # the model was not asked again for the paused step
    sent = harness.requests()[-1]["messages"]
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": call_id,
        "name": "delete",
        "content": "deleted pod/web-1",
    }


async def test_denying_tells_the_model_why(harness) -> None:
    safe, danger = _tools()
    agent, events, messages = await _pause(harness, safe, danger)
    (pending,) = final(events).pending
    decision = {"approved": False, "reason": "production, not now", "digest": pending.digest}
    resumed = await collect(agent.run(messages, decisions={pending.tool_call_id: decision}))
    (result,) = of_kind(resumed, "tool_result")
    assert result.status == "denied"
    assert "production, not now" in result.output
    assert danger.calls == []
    assert final(resumed).text == f"result: {result.output}"


async def test_resuming_without_a_decision_pauses_again(harness) -> None:
    safe, danger = _tools()
    agent, events, messages = await _pause(harness, safe, danger)
    again = await collect(agent.run(messages, decisions={"unrelated": (True, None)}))
    assert final(again).kind == "approval_needed"
    assert danger.calls == [] and safe.calls == [{"x": "shop"}]


async def test_with_approvals_disabled_the_call_becomes_an_error_result(harness) -> None:
    safe, danger = _tools()
    _pausing_scenario(harness)
    agent = harness.agent(registry(safe, danger), approvals=False)
    events = await collect(agent.run(agent.initial_messages("clean up web-1")))
    answer = final(events)
    assert answer.kind == "answer"
    delete = [r for r in of_kind(events, "tool_result") if r.name == "delete"][0]
    assert delete.status == "error" and "approval" in delete.output
    assert answer.text == f"result: {delete.output}"
    assert danger.calls == []


async def test_after_a_crash_started_calls_are_not_rerun(harness) -> None:
    harness.scenario(
        steps=[
            {"content": "unused"},
            {"content": "after restart: {{ tool_outputs() | join(' | ') }}"},
        ]
    )
    one = FakeTool("one")
    two = FakeTool("two", lambda p: "two ran")
    agent = harness.agent(registry(one, two))
    stored = agent.initial_messages("do both") + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "one", "arguments": json.dumps({"x": "a"})},
                },
                {"id": "c2", "type": "function", "function": {"name": "two", "arguments": "{}"}},
            ],
        }
    ]
    events = await collect(agent.run(stored, started_call_ids={"c1"}))
    assert one.calls == [] and two.calls == [{}]
    results = {r.call_id: r for r in of_kind(events, "tool_result")}
    assert results["c1"].output == OUTCOME_UNKNOWN and results["c1"].status == "error"
    assert results["c2"].output == "two ran"
    assert [e.call_id for e in of_kind(events, "tool_started")] == ["c2"]
    assert final(events).text == f"after restart: {OUTCOME_UNKNOWN} | two ran"
