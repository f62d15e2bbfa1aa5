"""The loop guard: repeated equivalent calls are refused then stopped; steps that only
return results already seen get a warning, then the run stops."""

from __future__ import annotations

from agent_support import FakeTool, collect, final, of_kind, registry, transcript

from lestrade.operator.agent import prompt_text
from lestrade.operator.agent.guard import LoopGuard, call_signature


def test_equivalent_arguments_have_one_signature() -> None:
    a = call_signature("get", {"name": "Web-1", "ns": "shop", "extra": None})
    b = call_signature("get", {"ns": "  SHOP", "name": "web-1 ", "extra": ""})
    assert a == b
    assert a != call_signature("get", {"name": "web-2", "ns": "shop"})
    assert a != call_signature("describe", {"name": "web-1", "ns": "shop"})


def test_guard_state_rebuilds_from_a_transcript() -> None:
    guard = LoopGuard(repeat_limit=2, no_progress_steps=1)
    guard.seed([("get", {"x": "a"}), ("get", {"x": "a"})], ["out"])
    assert guard.refuse("get", {"x": "A"}) is not None
    assert guard.record_step(["out"]) == "warn"


async def test_repeating_the_same_call_is_refused_then_stopped(harness) -> None:
    variants = [
        {"name": "Web-1", "ns": "shop"},
        {"ns": "shop ", "name": "web-1"},
        {"name": "WEB-1", "ns": "Shop"},
    ]
    harness.scenario(
        steps=[{"tool_calls": [{"name": "get", "arguments": v}]} for v in variants]
        + [{"tool_calls": [{"name": "get", "arguments": variants[0]}]}],
    )
    get = FakeTool("get", lambda p: "pod web-1 Running")
    agent = harness.agent(registry(get), repeat_limit=2, max_steps=20)
    events = await collect(agent.run(agent.initial_messages("check web-1")))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "LoopDetected")
    assert len(get.calls) == 2  # the third and fourth equivalent calls never ran
    refused = [r for r in of_kind(events, "tool_result") if "Loop guard" in r.output]
    assert len(refused) == 2 and all(r.status == "error" for r in refused)
    assert len(harness.requests()) == 4


async def test_steps_without_new_information_warn_then_stop(harness) -> None:
    harness.scenario(
        steps=[
            {
                "tool_calls": [
                    {
                        "name": "status",
                        "arguments": {"x": "try {{ tool_outputs('status') | length }}"},
                    }
                ]
            }
        ],
    )
    status = FakeTool("status", lambda p: "everything pending")  # new args, same answer
    agent = harness.agent(registry(status), no_progress_steps=2, max_steps=20)
    start = agent.initial_messages("wait for it")
    events = await collect(agent.run(start))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "LoopDetected")
    assert "not making progress" in error.message
    # step 1 is new, steps 2-3 stale -> warning, steps 4-5 stale -> stop
    assert len(status.calls) == 5
    notes = [
        m for m in transcript(events, start) if m["role"] == "user" and m["content"].startswith(prompt_text.NOTE_PREFIX)
    ]
    assert len(notes) == 1 and "Loop guard" in notes[0]["content"]
    assert notes[0] in harness.requests()[3]["messages"]  # the model was told
