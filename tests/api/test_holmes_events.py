"""Progress records -> HolmesGPT events, as pure functions of a transcript (unit tests: the
records are built here; the end-to-end tests read the operator's own)."""

from __future__ import annotations

import json

import pytest

from lestrade.api.holmes.events import EventPosition, events_after, history_at, metadata_of, tool_calls_of
from lestrade.runs.transcript import TranscriptState, decode_chunks


def transcript(*records: dict) -> TranscriptState:
    return decode_chunks([{f"r-{n:07d}": json.dumps(r) for n, r in enumerate(records)}])


SYSTEM = {"t": "message", "message": {"role": "system", "content": "sys"}}
USER = {"t": "message", "message": {"role": "user", "content": "why?"}}
CALL = {
    "t": "message",
    "message": {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "kubectl_logs", "arguments": '{"pod": "web"}'}},
            {"id": "c2", "type": "function", "function": {"name": "kubectl_describe", "arguments": "{}"}},
        ],
    },
}
TOKENS = {
    "t": "tokens",
    "promptTokens": 100,
    "completionTokens": 10,
    "totalTokens": 110,
    "cost": 0.5,
    "breakdown": {"total_tokens": 90, "system_tokens": 20},
    "maxTokens": 1000,
    "maxOutputTokens": 100,
    "truncations": [
        {
            "tool_call_id": "c1",
            "tool_name": "kubectl_logs",
            "start_index": 0,
            "end_index": 5,
            "original_token_count": 50,
        }
    ],
}


def names(state: TranscriptState, after: EventPosition = EventPosition(-1), **kw: object) -> list[str]:
    return [e.name for e in events_after(state, after, kind="chat", since=0, **kw)]


def test_one_record_many_events_each_with_its_own_position() -> None:
    state = transcript(SYSTEM, USER, CALL)
    events = list(events_after(state, EventPosition(-1), kind="chat", since=0))
    assert [(e.name, str(e.position)) for e in events] == [
        ("ai_message", "2"),
        ("start_tool_calling", "2.1"),
        ("start_tool_calling", "2.2"),
    ]
    # Resuming after the first event of a record gives the rest of that record.
    assert [str(e.position) for e in events_after(state, EventPosition(2, 0), kind="chat", since=0)] == ["2.1", "2.2"]
    assert EventPosition.parse("2.1") == EventPosition(2, 1) and str(EventPosition.parse("7")) == "7"
    for bad in ("-1", "x", "1.-2"):
        with pytest.raises(ValueError):
            EventPosition.parse(bad)


def test_tool_results_errors_and_denials() -> None:
    state = transcript(
        SYSTEM,
        USER,
        CALL,
        TOKENS,
        {"t": "tool_result", "id": "c1", "name": "kubectl_logs", "status": "denied", "description": "logs web"},
        {"t": "message", "message": {"role": "tool", "tool_call_id": "c1", "content": "The user denied this."}},
        {"t": "tool_result", "id": "c2", "name": "kubectl_describe", "status": "success", "description": "describe"},
        {"t": "message", "message": {"role": "tool", "tool_call_id": "c2", "content": "all fine"}},
    )
    results = [e.data for e in events_after(state, EventPosition(3, 99), kind="chat", since=0)]
    assert results[0] == {
        "tool_call_id": "c1",
        "role": "tool",
        "description": "logs web",
        "name": "kubectl_logs",
        "result": {"status": "error", "data": None, "error": "The user denied this.", "params": {"pod": "web"}},
    }
    assert results[1]["result"] == {"status": "success", "data": "all fine", "error": None, "params": {}}
    assert [c["tool_name"] for c in tool_calls_of(state)] == ["kubectl_logs", "kubectl_describe"]


def test_token_count_and_metadata_follow_reference_000() -> None:
    state = transcript(SYSTEM, USER, TOKENS, {**TOKENS, "promptTokens": 1, "completionTokens": 1, "totalTokens": 2})
    (first, _) = [e.data for e in events_after(state, EventPosition(-1), kind="chat", since=0)]
    assert first["metadata"] == {
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        "tokens": {"total_tokens": 90, "system_tokens": 20},
        "max_tokens": 1000,
        "max_output_tokens": 100,
        "truncations": TOKENS["truncations"],
    }
    total = metadata_of(state)
    assert total["usage"] == {"prompt_tokens": 101, "completion_tokens": 11, "total_tokens": 112}
    assert total["cost"] == 1.0 and total["max_tokens"] == 1000
    assert metadata_of(state, since=3)["usage"]["total_tokens"] == 2  # one turn's usage only


def test_cached_prompt_tokens_show_in_the_metadata_when_the_provider_reported_them() -> None:
    state = transcript(SYSTEM, USER, {**TOKENS, "cachedTokens": 80}, {**TOKENS, "cachedTokens": 90})
    (first, _) = [e.data for e in events_after(state, EventPosition(-1), kind="chat", since=0)]
    assert first["metadata"]["usage"]["cached_tokens"] == 80
    assert metadata_of(state)["usage"]["cached_tokens"] == 170


def test_errors_say_5204_for_rate_limits_and_1_otherwise() -> None:
    for reason, code in (("RateLimited", 5204), ("ModelError", 1)):
        state = transcript(SYSTEM, USER, {"t": "error", "reason": reason, "message": "it broke"})
        (event,) = events_after(state, EventPosition(-1), kind="chat", since=0)
        assert event.name == "error"
        assert event.data == {"description": "it broke", "error_code": code, "msg": "it broke", "success": False}


def test_compaction_events_and_the_history_after_a_compaction() -> None:
    summary = {"role": "user", "content": "<analysis>the pod crashed</analysis>"}
    old = [{"t": "message", "message": {"role": "assistant", "content": f"a{i}"}} for i in range(4)]
    state = transcript(
        SYSTEM,
        USER,
        *old,
        {
            "t": "compaction",
            "at": 6,
            "messages": [SYSTEM["message"], summary],
            "tokensBefore": 1000,
            "tokensAfter": 200,
        },
        {"t": "message", "message": {"role": "user", "content": "next"}},
        {"t": "answer", "text": "done"},
    )
    events = list(events_after(state, EventPosition(5, 99), kind="chat", since=0, conversation="chat-x"))
    assert [e.name for e in events] == [
        "conversation_history_compaction_start",
        "conversation_history_compacted",
        "ai_answer_end",
    ]
    start, compacted, end = (e.data for e in events)
    assert start["metadata"] == {"initial_tokens": 1000, "num_messages": 6}
    assert compacted["compaction_summary"] == summary["content"]
    assert compacted["metadata"]["compression_ratio_pct"] == 80.0
    assert compacted["metadata"]["num_messages_before"] == 6 and compacted["metadata"]["num_messages_after"] == 2
    assert [m["content"] for m in end["conversation_history"]] == ["sys", summary["content"], "next"]
    assert end["conversation_history"][0]["conversation_id"] == "chat-x" and end["conversation_id"] == "chat-x"
    assert history_at(state, 5) == [r["message"] for r in (SYSTEM, USER, *old)]


def test_investigation_answers_carry_sections() -> None:
    state = transcript(SYSTEM, USER, {"t": "answer", "text": "# A\nx", "sections": {"A": "x"}})
    (end,) = events_after(state, EventPosition(-1), kind="investigation", since=0)
    assert end.data["sections"] == {"A": "x"} and end.data["analysis"] == "# A\nx" and end.data["instructions"] == []
    assert "conversation_history" not in end.data
