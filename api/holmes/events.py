"""Progress records, as HolmesGPT's SSE events and response fields (references 000 and 001).

Pure functions of a transcript (`lestrade.runs.transcript.TranscriptState`): every API
replica computes the same events with the same ids from the same records, which is what lets
a client reconnect anywhere with `Last-Event-ID`.

One record gives zero or more events:

| record | events |
|---|---|
| assistant `message` | `ai_message` (when it has text), `start_tool_calling` per tool call |
| tool `message` | `tool_calling_result` (with the `tool_result` record's status and description) |
| `approval_needed` | `tool_calling_result` (status `approval_required`) per call that needs approval, `approval_required` (frontend calls in `pending_frontend_tool_calls`) |
| `tokens` | `token_count` |
| `compaction` | `conversation_history_compaction_start`, `conversation_history_compacted` |
| `answer` | `ai_answer_end` |
| `error` | `error` (5204 for rate limits, 1 otherwise) |

Other records (system and user messages, tool starts, decisions, turn starts) give none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from lestrade.runs.progress import call_arguments
from lestrade.runs.records import CompactionRecord, Record, TokensRecord
from lestrade.runs.transcript import RecordType, TranscriptState

__all__ = [
    "Event",
    "EventPosition",
    "RunKind",
    "events_after",
    "history_at",
    "tool_calls_of",
    "metadata_of",
    "TERMINAL_RECORDS",
    "CONVERSATION_KEY",
    "RATE_LIMIT_ERROR_CODE",
    "GENERIC_ERROR_CODE",
]

RunKind = Literal["chat", "investigation"]

TERMINAL_RECORDS = frozenset({RecordType.ANSWER, RecordType.ERROR, RecordType.APPROVAL_NEEDED})
"""Records after which a stream (of a turn, or of an investigation) ends."""

CONVERSATION_KEY = "conversation_id"
"""Key the API adds to the system message of every history it returns, and to its response
bodies: the name of the Conversation holding the chat, so a client that resends the history
continues that Conversation."""

RATE_LIMIT_ERROR_CODE = 5204
GENERIC_ERROR_CODE = 1


@dataclass(frozen=True, order=True)
class EventPosition:
    """Where an event is in the progress sequence: record `seq`, `index`-th event of it."""

    seq: int
    index: int = 0

    def __str__(self) -> str:
        return str(self.seq) if self.index == 0 else f"{self.seq}.{self.index}"

    @classmethod
    def parse(cls, text: str) -> EventPosition:
        seq, _, index = text.partition(".")
        position = cls(int(seq), int(index) if index else 0)
        if position.seq < 0 or position.index < 0:
            raise ValueError(text)
        return position


@dataclass(frozen=True)
class Event:
    position: EventPosition
    name: str
    data: dict[str, Any]


# -- pieces shared by events and responses --------------------------------------------------


def history_at(state: TranscriptState, seq: int, conversation: str | None = None) -> list[dict[str, Any]]:
    """The working conversation (what the model sees: the latest compaction, then what
    followed) as of record `seq`, marked with the Conversation's name when given."""
    messages: list[dict[str, Any]] = []
    compaction: CompactionRecord | None = None
    for record in state.records[: seq + 1]:
        if record["t"] == RecordType.MESSAGE:
            messages.append(record["message"])
        elif record["t"] == RecordType.COMPACTION:
            compaction = record
    if compaction is not None:
        messages = list(compaction["messages"]) + messages[int(compaction["at"]) :]
    history = [dict(m) for m in messages]
    if conversation and history and history[0].get("role") == "system":
        history[0][CONVERSATION_KEY] = conversation
    return history


@dataclass
class _Calls:
    """What the transcript says about each tool call id: name, params, outcome."""

    names: dict[str, str]
    params: dict[str, dict[str, Any]]
    results: dict[str, Mapping[str, Any]]

    @classmethod
    def of(cls, state: TranscriptState) -> _Calls:
        names: dict[str, str] = {}
        params: dict[str, dict[str, Any]] = {}
        results: dict[str, Mapping[str, Any]] = {}
        for record in state.records:
            if record["t"] == RecordType.MESSAGE and record["message"].get("role") == "assistant":
                for part in record["message"].get("tool_calls") or []:
                    fn = part.get("function") or {}
                    names[part.get("id", "")] = str(fn.get("name") or "")
                    params[part.get("id", "")] = call_arguments(fn.get("arguments"))
            elif record["t"] == RecordType.TOOL_RESULT:
                results[record["id"]] = record
        return cls(names, params, results)

    def result_event(self, call_id: str, output: Any, status: str | None = None) -> dict[str, Any]:
        record = self.results.get(call_id) or {}
        status = status or str(record.get("status") or "success")
        wire_status = "error" if status == "denied" else status
        text = output if isinstance(output, str) or output is None else json.dumps(output)
        failed = wire_status == "error"
        return {
            "tool_call_id": call_id,
            "role": "tool",
            "description": str(record.get("description") or ""),
            "name": self.names.get(call_id) or str(record.get("name") or ""),
            "result": {
                "status": wire_status,
                "data": None if failed else text,
                "error": text if failed else None,
                "params": self.params.get(call_id, {}),
            },
        }


def tool_calls_of(state: TranscriptState, since: int = 0) -> list[dict[str, Any]]:
    """The tool calls that ended from record `since` on, in the shape of a response's
    `tool_calls` (HolmesGPT's tool result responses)."""
    calls = _Calls.of(state)
    found: list[dict[str, Any]] = []
    for record in state.records[since:]:
        message = record["message"] if record["t"] == RecordType.MESSAGE else None
        if message and message.get("role") == "tool":
            event = calls.result_event(str(message.get("tool_call_id")), message.get("content"))
            found.append(
                {
                    "tool_call_id": event["tool_call_id"],
                    "tool_name": event["name"],
                    "description": event["description"],
                    "role": "tool",
                    "result": event["result"],
                }
            )
    return found


def _usage(record: TokensRecord) -> dict[str, int]:
    usage = {
        "prompt_tokens": int(record.get("promptTokens") or 0),
        "completion_tokens": int(record.get("completionTokens") or 0),
        "total_tokens": int(record.get("totalTokens") or 0),
    }
    if record.get("cachedTokens"):  # only from providers that report a prompt-cache hit
        usage["cached_tokens"] = int(record["cachedTokens"])
    return usage


def metadata_of(state: TranscriptState, since: int = 0, upto: int | None = None) -> dict[str, Any]:
    """Reference 000's metadata for the records [since, upto]: usage summed over the model
    calls, the latest window breakdown and limits, every truncation, and the cost."""
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    cost = 0.0
    latest: TokensRecord | None = None
    end = len(state.records) if upto is None else upto + 1
    for record in state.records[since:end]:
        if record["t"] == RecordType.TOKENS:
            for key, value in _usage(record).items():
                usage[key] = usage.get(key, 0) + value
            cost += float(record.get("cost") or 0.0)
            latest = record
    metadata: dict[str, Any] = {"usage": usage, "cost": round(cost, 8)}
    if latest is not None:
        if latest.get("breakdown"):
            metadata["tokens"] = dict(latest["breakdown"])
        if latest.get("maxTokens"):
            metadata["max_tokens"] = int(latest["maxTokens"])
            metadata["max_output_tokens"] = int(latest.get("maxOutputTokens") or 0)
        metadata["truncations"] = list(latest.get("truncations") or [])
    return metadata


def _token_metadata(record: TokensRecord) -> dict[str, Any]:
    metadata: dict[str, Any] = {"usage": _usage(record)}
    if record.get("breakdown"):
        metadata["tokens"] = dict(record["breakdown"])
    if record.get("maxTokens"):
        metadata["max_tokens"] = int(record["maxTokens"])
        metadata["max_output_tokens"] = int(record.get("maxOutputTokens") or 0)
    metadata["truncations"] = list(record.get("truncations") or [])
    return metadata


def error_payload(reason: str, message: str) -> dict[str, Any]:
    code = RATE_LIMIT_ERROR_CODE if reason == "RateLimited" else GENERIC_ERROR_CODE
    return {"description": message or reason, "error_code": code, "msg": message or reason, "success": False}


# -- events -------------------------------------------------------------------------------------


def events_after(
    state: TranscriptState,
    after: EventPosition,
    *,
    kind: RunKind,
    since: int,
    conversation: str | None = None,
) -> Iterator[Event]:
    """The events after position `after`, for the run (or turn) whose records start at
    `since` (usage in metadata is summed from there)."""
    calls = _Calls.of(state)
    last_tokens: TokensRecord | None = None
    for seq, record in enumerate(state.records):
        if record["t"] == RecordType.TOKENS:
            last_tokens = record
        if seq < after.seq:
            continue
        for index, (name, data) in enumerate(
            _record_events(state, seq, record, calls, last_tokens, kind, since, conversation)
        ):
            position = EventPosition(seq, index)
            if position > after:
                yield Event(position, name, data)


def _record_events(
    state: TranscriptState,
    seq: int,
    record: Record,
    calls: _Calls,
    last_tokens: TokensRecord | None,
    kind: RunKind,
    since: int,
    conversation: str | None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    if record["t"] == RecordType.MESSAGE:
        message = record["message"]
        role = message.get("role")
        if role == "assistant":
            content = message.get("content")
            if isinstance(content, str) and content.strip():
                yield (
                    "ai_message",
                    {
                        "content": content,
                        "reasoning": message.get("reasoning_content"),
                        "metadata": _token_metadata(last_tokens) if last_tokens else {},
                    },
                )
            for part in message.get("tool_calls") or []:
                yield (
                    "start_tool_calling",
                    {
                        "tool_name": str((part.get("function") or {}).get("name") or ""),
                        "id": part.get("id", ""),
                    },
                )
        elif role == "tool":
            yield (
                "tool_calling_result",
                calls.result_event(str(message.get("tool_call_id")), message.get("content")),
            )
    elif record["t"] == RecordType.APPROVAL_NEEDED:
        pending = [p for p in record.get("pending") or [] if not p.get("frontend")]
        frontend = [p for p in record.get("pending") or [] if p.get("frontend")]
        for p in pending:
            yield (
                "tool_calling_result",
                {
                    **calls.result_event(p["toolCallId"], None, "approval_required"),
                    "description": p.get("description") or "",
                },
            )
        yield (
            "approval_required",
            {
                "content": None,
                "conversation_history": history_at(state, seq, conversation),
                "follow_up_actions": [],
                "requires_approval": True,
                "pending_approvals": [
                    {
                        "tool_call_id": p["toolCallId"],
                        "tool_name": p.get("toolName") or "",
                        "description": p.get("description") or "",
                        "params": p.get("params") or {},
                        # the stored call's digest: a tool_decision carrying it applies
                        # to exactly this call (server-verified, valid across restarts)
                        "ticket": p.get("digest") or "",
                    }
                    for p in pending
                ],
                "pending_frontend_tool_calls": [
                    {
                        "tool_call_id": p["toolCallId"],
                        "tool_name": p.get("toolName") or "",
                        "arguments": calls.params.get(p["toolCallId"], p.get("params") or {}),
                    }
                    for p in frontend
                ],
                **({CONVERSATION_KEY: conversation} if conversation else {}),
            },
        )
    elif record["t"] == RecordType.TOKENS:
        yield "token_count", {"metadata": _token_metadata(record)}
    elif record["t"] == RecordType.COMPACTION:
        yield from _compaction_events(state, seq, record)
    elif record["t"] == RecordType.ANSWER:
        text = str(record.get("text") or "")
        metadata = metadata_of(state, since, seq)
        if kind == "investigation":
            yield (
                "ai_answer_end",
                {
                    "sections": record.get("sections"),
                    "analysis": text,
                    "instructions": [],
                    "metadata": metadata,
                },
            )
        else:
            yield (
                "ai_answer_end",
                {
                    "analysis": text,
                    "conversation_history": history_at(state, seq, conversation),
                    "follow_up_actions": [],
                    "metadata": metadata,
                    **({CONVERSATION_KEY: conversation} if conversation else {}),
                },
            )
    elif record["t"] == RecordType.ERROR:
        yield "error", error_payload(str(record.get("reason") or ""), str(record.get("message") or ""))
    else:
        return


def _compaction_events(
    state: TranscriptState, seq: int, record: CompactionRecord
) -> Iterator[tuple[str, dict[str, Any]]]:
    before = int(record.get("tokensBefore") or 0)
    after = int(record.get("tokensAfter") or 0)
    messages_before = len(history_at(state, seq - 1)) if seq else 0
    compacted = list(record.get("messages") or [])
    summary = next(
        (
            str(m.get("content"))
            for m in compacted
            if m.get("role") != "system" and "<analysis>" in str(m.get("content") or "")
        ),
        None,
    )
    yield (
        "conversation_history_compaction_start",
        {
            "content": f"Compacting conversation history ({before} tokens, {messages_before} messages)...",
            "metadata": {"initial_tokens": before, "num_messages": messages_before},
        },
    )
    yield (
        "conversation_history_compacted",
        {
            "content": f"The conversation history has been compacted from {before} to {after} tokens",
            "compaction_summary": summary,
            "messages": compacted,
            "metadata": {
                "initial_tokens": before,
                "compacted_tokens": after,
                "compression_ratio_pct": round(100 * (1 - after / before), 1) if before else 0.0,
                "num_messages_before": messages_before,
                "num_messages_after": len(compacted),
            },
        },
    )
