"""The hosted chat API's SSE events (reference 002), from the HolmesGPT events of a turn.

002 names the same events as 000 but gives them payloads of their own; this maps one onto the
other, event by event, so the hosted stream is the chat stream the other endpoints serve:

| 000 event | 002 payload |
|---|---|
| `start_tool_calling` | `{tool_call_id, tool_name, description}` |
| `tool_calling_result` | `{tool_call_id, name, result: {status, data} or {status, error}}` |
| `ai_message` | `{content}` |
| `token_count` | `{input_tokens, output_tokens}` |
| `ai_answer_end` | `{analysis}` (terminal) |
| `error` | `{msg, error_code}` (terminal) |
| `approval_required` | `{conversation_history}`, the pending calls flagged `pending_approval: true` (terminal) |

Events 002 does not have (compaction notices) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lestrade.api.holmes.events import CONVERSATION_KEY, RATE_LIMIT_ERROR_CODE, Event
from lestrade.runs.transcript import RecordType, TranscriptState

__all__ = ["hosted_event", "error_code_for", "DESCRIPTION_LIMIT"]

DESCRIPTION_LIMIT = 200


def error_code_for(reason: str) -> str:
    """A record's reason (`RateLimited`, `Timeout`, ...) as 002's upper-case error code."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", reason).upper() or "HOLMES_ERROR"


def _call(state: TranscriptState, seq: int, call_id: str) -> tuple[str, str]:
    """(name, arguments) of tool call `call_id` of the assistant message at record `seq`."""
    record = state.records[seq] if 0 <= seq < len(state.records) else None
    message = record["message"] if record is not None and record["t"] == RecordType.MESSAGE else {}
    for call in message.get("tool_calls") or []:
        if call.get("id") == call_id:
            fn = call.get("function") or {}
            return str(fn.get("name") or ""), str(fn.get("arguments") or "")
    return "", ""


def _history(history: list[Mapping[str, Any]], pending: set[str]) -> list[dict[str, Any]]:
    flagged: list[dict[str, Any]] = []
    for message in history:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "pending_approval": call.get("id") in pending} for call in message["tool_calls"]
            ]
        flagged.append(message)
    return flagged


def hosted_event(event: Event, state: TranscriptState) -> tuple[str, dict[str, Any]] | None:
    """The 002 event for one 000 event of a turn (None: 002 has no such event)."""
    data = event.data
    match event.name:
        case "start_tool_calling":
            call_id = str(data.get("id") or "")
            name, arguments = _call(state, event.position.seq, call_id)
            description = f"{name or data.get('tool_name')} {arguments}".strip()
            return event.name, {
                "tool_call_id": call_id,
                "tool_name": str(data.get("tool_name") or name),
                "description": description[:DESCRIPTION_LIMIT],
            }
        case "tool_calling_result":
            result = data.get("result") or {}
            status = str(result.get("status") or "success")
            outcome: dict[str, Any] = {"status": status}
            if status == "error":
                outcome["error"] = result.get("error")
            elif status != "approval_required":
                outcome["data"] = result.get("data")
            return event.name, {"tool_call_id": data.get("tool_call_id"), "name": data.get("name"), "result": outcome}
        case "ai_message":
            return event.name, {"content": data.get("content")}
        case "token_count":
            usage = (data.get("metadata") or {}).get("usage") or {}
            return event.name, {
                "input_tokens": int(usage.get("prompt_tokens") or 0),
                "output_tokens": int(usage.get("completion_tokens") or 0),
            }
        case "ai_answer_end":
            return event.name, {"analysis": data.get("analysis") or ""}
        case "error":
            record = state.records[event.position.seq] if event.position.seq < len(state.records) else None
            reason = str(record.get("reason") or "") if record is not None and record["t"] == RecordType.ERROR else ""
            if data.get("error_code") == RATE_LIMIT_ERROR_CODE:
                reason = "RateLimited"
            return event.name, {"msg": str(data.get("msg") or ""), "error_code": error_code_for(reason or "Failed")}
        case "approval_required":
            pending = {str(p.get("tool_call_id")) for p in data.get("pending_approvals") or []}
            pending |= {str(p.get("tool_call_id")) for p in data.get("pending_frontend_tool_calls") or []}
            body = {"conversation_history": _history(list(data.get("conversation_history") or []), pending)}
            if data.get(CONVERSATION_KEY):
                body[CONVERSATION_KEY] = data[CONVERSATION_KEY]  # to resume with /api/chat's tool_decisions
            return event.name, body
        case _:
            return None
