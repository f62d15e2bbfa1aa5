"""Approvals bound to one call: ids unique within the run whatever the provider sends, and a
decision applied only to the call whose id and digest (name + exact arguments) it carries."""

from __future__ import annotations

import json

from agent_support import FakeTool, collect, final, of_kind, registry, transcript

from lestrade.operator.agent import Decision
from lestrade.operator.agent.loop import _Run
from lestrade.operator.agent.model import ModelReply, RawToolCall
from lestrade.operator.agent.toolcalls import CallIds, call_digest, calls_of
from lestrade.operator.agent.turn import DECISION_MISMATCH


def _delete() -> FakeTool:
    return FakeTool("delete", lambda p: f"deleted {p['x']}", approval=lambda p: True)


def _call(name: str, x: str, call_id: str | None) -> dict:
    call = {"name": name, "arguments": {"x": x}}
    if call_id is not None:
        call["id"] = call_id
    return call


def _assistant_ids(messages: list[dict]) -> list[str]:
    return [c.id for m in messages if m.get("role") == "assistant" for c in calls_of(m)]


async def test_a_provider_repeating_call_0_every_turn_gets_distinct_ids(harness) -> None:
    harness.scenario(
        steps=[
            {"tool_calls": [_call("echo", "1", "call_0"), _call("echo", "2", "call_1")]},
            {"tool_calls": [_call("echo", "3", "call_0"), _call("echo", "4", "call_1")]},
            {"tool_calls": [_call("echo", "5", "call_0")]},
            {"content": "{{ tool_outputs('echo') | join(',') }}"},
        ]
    )
    agent = harness.agent(registry(FakeTool("echo", lambda p: p["x"])))
    start = agent.initial_messages("q")
    events = await collect(agent.run(start))
    assert final(events).text == "1,2,3,4,5"
    ids = _assistant_ids(transcript(events, start))
    assert len(ids) == 5 and len(set(ids)) == 5
    assert ids[:2] == ["call_0", "call_1"]  # unseen provider ids are kept
    # The model saw each result under the id of the call that produced it.
    sent = harness.requests()[-1]["messages"]
    by_id = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert [by_id[i] for i in ids] == ["1", "2", "3", "4", "5"]


def test_calls_without_an_id_and_odd_ids_get_fresh_unique_ones() -> None:
    ids = CallIds({"call_0"})
    given = ["", "", "call_0", "x" * 41, "a b", "ok-1", "ok-1"]
    assigned = [ids.assign(i) for i in given]
    assert len(set(assigned)) == len(given)
    assert "call_0" not in assigned
    assert assigned[5] == "ok-1" and assigned[6] != "ok-1"
    assert all(len(i) <= 40 and " " not in i for i in assigned)


async def test_duplicate_ids_in_one_response_never_share_an_id(harness) -> None:
    # The old de-duplication turned the third `x` into `x_2`, the id of the second call.
    harness.scenario(
        steps=[
            {
                "tool_calls": [
                    _call("echo", "1", "x"),
                    _call("echo", "2", "x_2"),
                    _call("echo", "3", "x"),
                ]
            },
            {"content": "{{ tool_outputs('echo') | join(',') }}"},
        ]
    )
    echo = FakeTool("echo", lambda p: p["x"])
    agent = harness.agent(registry(echo))
    events = await collect(agent.run(agent.initial_messages("q")))
    assert final(events).text == "1,2,3"
    assert len({r.call_id for r in of_kind(events, "tool_result")}) == 3
    assert echo.calls == [{"x": "1"}, {"x": "2"}, {"x": "3"}]


async def test_one_approval_runs_one_call_even_when_the_provider_repeated_its_id(harness) -> None:
    harness.scenario(
        steps=[
            {"tool_calls": [_call("delete", "a", "d"), _call("delete", "b", "d")]},
            {"content": "done"},
        ]
    )
    delete = _delete()
    agent = harness.agent(registry(delete))
    start = agent.initial_messages("q")
    events = await collect(agent.run(start))
    first, second = final(events).pending
    assert first.tool_call_id != second.tool_call_id
    messages = transcript(events, start)

    decision = {first.tool_call_id: Decision(True, digest=first.digest)}
    resumed = await collect(agent.run(messages, decisions=decision))
    assert delete.calls == [{"x": "a"}]
    (still,) = final(resumed).pending
    assert (still.tool_call_id, still.params) == (second.tool_call_id, {"x": "b"})


async def test_an_old_decision_never_applies_to_a_later_call(harness) -> None:
    # The provider calls every call `call_0`: the approval of the first delete must not run
    # the second, even though the operator passes every decision the run ever acted upon.
    harness.scenario(
        steps=[
            {"tool_calls": [_call("delete", "first", "call_0")]},
            {"tool_calls": [_call("delete", "second", "call_0")]},
            {"content": "done"},
        ]
    )
    delete = _delete()
    agent = harness.agent(registry(delete))
    start = agent.initial_messages("q")
    events = await collect(agent.run(start))
    (first,) = final(events).pending
    assert first.tool_call_id == "call_0"
    messages = transcript(events, start)

    decisions = {"call_0": Decision(True, digest=first.digest)}
    resumed = await collect(agent.run(messages, decisions=decisions))
    assert delete.calls == [{"x": "first"}]
    (second,) = final(resumed).pending
    assert second.params == {"x": "second"}
    assert second.tool_call_id != "call_0"
    messages = transcript(resumed, messages)

    # Resuming again with the old decision only: the new call still waits, nothing ran.
    again = await collect(agent.run(messages, decisions=decisions))
    (waiting,) = final(again).pending
    assert waiting.tool_call_id == second.tool_call_id  # stable across a resume
    assert delete.calls == [{"x": "first"}]


async def test_a_decision_whose_digest_does_not_match_is_not_applied(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [_call("delete", "pod/web-1", "d1")]}, {"content": "done"}])
    delete = _delete()
    agent = harness.agent(registry(delete))
    start = agent.initial_messages("q")
    events = await collect(agent.run(start))
    (pending,) = final(events).pending
    assert pending.digest == call_digest("delete", json.dumps({"x": "pod/web-1"}))
    messages = transcript(events, start)

    wrong = call_digest("delete", json.dumps({"x": "pod/other"}))
    for decision in [Decision(True, digest=wrong), (True, None), {"approved": True}]:
        resumed = await collect(agent.run(messages, decisions={"d1": decision}))
        (result,) = of_kind(resumed, "tool_result")
        assert (result.call_id, result.status, result.output) == ("d1", "error", DECISION_MISMATCH)
        assert final(resumed).kind == "answer"
    assert delete.calls == []


async def test_a_decision_does_not_follow_arguments_changed_in_the_transcript(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [_call("delete", "pod/web-1", "d1")]}, {"content": "done"}])
    delete = _delete()
    agent = harness.agent(registry(delete))
    start = agent.initial_messages("q")
    events = await collect(agent.run(start))
    (pending,) = final(events).pending
    messages = transcript(events, start)
    tampered = json.loads(json.dumps(messages))
    call = next(m for m in tampered if m.get("tool_calls"))["tool_calls"][0]
    call["function"]["arguments"] = json.dumps({"x": "namespace/prod"})

    resumed = await collect(agent.run(tampered, decisions={"d1": Decision(True, digest=pending.digest)}))
    assert delete.calls == []
    (result,) = of_kind(resumed, "tool_result")
    assert result.output == DECISION_MISMATCH


async def test_started_and_result_events_carry_the_digest(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [_call("echo", "1", "e1")]}, {"content": "ok"}])
    agent = harness.agent(registry(FakeTool("echo", lambda p: p["x"])))
    events = await collect(agent.run(agent.initial_messages("q")))
    digest = call_digest("echo", json.dumps({"x": "1"}))
    assert [e.digest for e in of_kind(events, "tool_started")] == [digest]
    assert [e.digest for e in of_kind(events, "tool_result")] == [digest]


def test_missing_ids_over_several_turns_and_a_resume_never_repeat(harness) -> None:
    agent = harness.agent(registry(FakeTool("echo")))
    messages = agent.initial_messages("q")
    seen: list[str] = []
    for _turn in range(3):  # each turn a fresh run resumed from the stored messages
        run = _Run(agent, messages, {}, frozenset())
        reply = ModelReply("", [RawToolCall("", "echo", "{}"), RawToolCall("", "echo", "{}")], None)
        calls = run._parsed_calls(reply)
        messages = [
            *messages,
            {"role": "assistant", "content": None, "tool_calls": [c.as_message_part() for c in calls]},
        ]
        messages += [{"role": "tool", "tool_call_id": c.id, "name": c.name, "content": "ok"} for c in calls]
        seen += [c.id for c in calls]
    assert len(seen) == 6 and len(set(seen)) == 6 and "" not in seen
