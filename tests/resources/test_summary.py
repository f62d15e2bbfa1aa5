"""What a person is shown of a run (`lestrade.runs.summary`): pure functions of a
resource body and its transcript records."""

from __future__ import annotations

from lestrade.runs.summary import is_finished, run_summary, timeline
from lestrade.runs.transcript import TranscriptState


def state_of(*records: dict) -> TranscriptState:
    state = TranscriptState()
    for record in records:
        state.apply(record)
    return state


def call(call_id: str, name: str, args: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def test_tool_calls_carry_their_outcome_and_output_and_the_answer_is_shown_once() -> None:
    state = state_of(
        {"t": "message", "message": {"role": "user", "content": "why?"}},
        {
            "t": "message",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("a", "kubectl_logs", '{"pod": "web-1"}'), call("b", "apply_fix", "not json")],
            },
        },
        {"t": "tool_started", "id": "a", "digest": "sha256:1"},
        {"t": "tool_result", "id": "a", "name": "kubectl_logs", "status": "success", "description": "logs of web-1"},
        {"t": "message", "message": {"role": "tool", "tool_call_id": "a", "content": "x" * 30_000}},
        {"t": "approval_needed", "pending": [{"toolCallId": "b", "toolName": "apply_fix", "description": "fix it"}]},
        {"t": "decision", "id": "b", "approved": False, "reason": "no"},
        {"t": "tokens", "promptTokens": 10, "completionTokens": 5, "totalTokens": 15, "cost": 0.5},
        {"t": "message", "message": {"role": "assistant", "content": "It ran out of memory."}},
        {"t": "tokens", "promptTokens": 1, "completionTokens": 1, "totalTokens": 2, "cost": 0},
        {"t": "answer", "text": "It ran out of memory."},
    )
    items = timeline(state)
    assert [i["kind"] for i in items] == [
        "user",
        "tool_call",
        "tool_call",
        "approval",
        "decision",
        "tokens",
        "tokens",
        "answer",
    ]
    logs, fix = items[1], items[2]
    assert (logs["status"], logs["description"], len(logs["output"])) == ("success", "logs of web-1", 20_000)
    assert logs["params"] == {"pod": "web-1"}
    assert fix["params"] == {"arguments": "not json"} and fix["status"] == "approval_required" and fix["output"] is None
    assert items[4] == {"seq": 6, "kind": "decision", "id": "b", "approved": False, "reason": "no"}
    assert [i["seq"] for i in timeline(state, since=8)] == [9, 10]


def test_a_summary_of_each_kind() -> None:
    inv = {
        "kind": "Investigation",
        "metadata": {"name": "i", "namespace": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"title": "t" * 400},
        "status": {"phase": "Succeeded", "analysis": "done", "usage": {"totalTokens": 7, "cost": 0.25}},
    }
    row = run_summary(inv)
    assert (row["title"], row["phase"], row["finished"], row["answer"]) == ("t" * 300, "Succeeded", True, "done")
    assert row["usage"] == {"promptTokens": 0, "completionTokens": 0, "totalTokens": 7, "cost": 0.25}
    conv = {
        "kind": "Conversation",
        "metadata": {"name": "c", "namespace": "n"},
        "spec": {"turns": [{"ask": "one"}, {"ask": "two"}]},
        "status": {"phase": "Answered", "turns": [{"phase": "Answered", "answer": "first"}]},
    }
    row = run_summary(conv)
    assert (row["title"], row["turns"], row["answer"], row["phase"]) == ("one", 2, "first", "Answered")
    assert not is_finished(conv)  # the second turn has no status yet
    assert run_summary({"metadata": {}})["phase"] == "Pending"


def test_the_person_s_ask_is_shown_and_the_prompt_around_it_kept() -> None:
    from lestrade.runs.summary import asks_of

    prompt = (
        "Why is web-1 restarting?\n\nWhen you have finished investigating, give your final answer as one JSON "
        "object ...\n\nCurrent time: 2026-11-26T10:00:00Z"
    )
    state = state_of(
        {"t": "message", "message": {"role": "user", "content": "an imported history message"}},
        {"t": "message", "message": {"role": "user", "content": prompt}},
        {"t": "message", "message": {"role": "assistant", "content": "OOM."}},
        {"t": "message", "message": {"role": "user", "content": "And now?"}},
    )
    conv = {"kind": "Conversation", "spec": {"turns": [{"ask": "Why is web-1 restarting?"}, {"ask": "And now?"}]}}
    users = [i for i in timeline(state, asks=asks_of(conv)) if i["kind"] == "user"]
    assert users[0] == {"seq": 0, "kind": "user", "text": "an imported history message"}
    assert users[1] == {"seq": 1, "kind": "user", "text": "Why is web-1 restarting?", "prompt": prompt}
    assert users[2] == {"seq": 3, "kind": "user", "text": "And now?"}  # nothing around it: no prompt to show
    # the asks are counted from the start even when the timeline starts later
    assert [i.get("text") for i in timeline(state, since=2, asks=asks_of(conv)) if i["kind"] == "user"] == ["And now?"]

    inv = {"kind": "Investigation", "spec": {"title": "web-1 crashloops", "source": "prometheus", "question": "Why?"}}
    first = "Investigate this prometheus issue: web-1 crashloops\n\nQuestion: Why?\n\nCurrent time: now"
    (item,) = timeline(state_of({"t": "message", "message": {"role": "user", "content": first}}), asks=asks_of(inv))
    assert (item["text"], item["prompt"]) == ("web-1 crashloops\n\nWhy?", first)
