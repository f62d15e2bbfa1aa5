"""What a person is shown of a run: a one-row summary of the resource, and its transcript as a
timeline of readable items.

The kubectl plugin (`lestrade.plugin`) and the web console (`lestrade.api.console.routes`) show the
same things, so both build them here from the resource and its transcript alone. Everything in
them was read from the cluster or written by a model: callers must treat every string as
hostile (the console renders it as text, the plugin strips terminal control characters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lestrade.resources.common import FINISHED_PHASES
from lestrade.resources.constants import CONVERSATION_KIND, INVESTIGATION_KIND, REQUEST_ANNOTATIONS
from lestrade.runs.progress import call_arguments
from lestrade.runs.transcript import RecordType, TranscriptState

__all__ = ["run_summary", "timeline", "asks_of", "turn_start", "MAX_OUTPUT_CHARS", "is_finished"]

MAX_OUTPUT_CHARS = 20_000
"""Characters of one tool output a timeline carries (the transcript keeps all of it)."""


def _usage(status: Mapping[str, Any]) -> dict[str, Any]:
    usage = dict(status.get("usage") or {})
    return {
        "promptTokens": int(usage.get("promptTokens") or 0),
        "completionTokens": int(usage.get("completionTokens") or 0),
        "totalTokens": int(usage.get("totalTokens") or 0),
        "cost": float(usage.get("cost") or 0.0),
    }


def is_finished(obj: Mapping[str, Any]) -> bool:
    """The run has nothing more to do (an Investigation ended, every Conversation turn ended)."""
    status = obj.get("status") or {}
    if obj.get("kind") == CONVERSATION_KIND:
        asks = ((obj.get("spec") or {}).get("turns")) or []
        turns = status.get("turns") or []
        return len(turns) >= len(asks) and all(t.get("phase") in FINISHED_PHASES for t in turns)
    return status.get("phase") in FINISHED_PHASES


def run_summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    """One row about an Investigation or a Conversation: who, what, where it stands, its cost."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    kind = str(obj.get("kind") or INVESTIGATION_KIND)
    if kind == CONVERSATION_KIND:
        turns = spec.get("turns") or []
        title = str((turns[0] or {}).get("ask") or "") if turns else ""
        turn_statuses = status.get("turns") or []
        answer = next((t.get("answer") for t in reversed(turn_statuses) if t.get("answer")), None)
    else:
        title = str(spec.get("title") or "")
        answer = status.get("analysis")
    return {
        "kind": kind,
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
        "created": meta.get("creationTimestamp"),
        "title": title[:300],
        "phase": status.get("phase") or "Pending",
        "finished": is_finished(obj),
        "message": status.get("message") or "",
        "model": status.get("model") or spec.get("model"),
        "steps": int(status.get("steps") or 0),
        "toolCallCount": int(status.get("toolCallCount") or 0),
        "usage": _usage(status),
        "pendingApprovals": list(status.get("pendingApprovals") or []),
        "decisions": dict(spec.get("decisions") or {}),
        "approvalsEnabled": bool(spec.get("enableToolApproval", True)),
        "turns": len(spec.get("turns") or []) if kind == CONVERSATION_KIND else None,
        "answer": answer,
        "sections": status.get("sections") if kind == INVESTIGATION_KIND else None,
        "findings": list(status.get("findings") or []) if kind == INVESTIGATION_KIND else None,
        "groundedFindings": status.get("groundedFindings") if kind == INVESTIGATION_KIND else None,
        "request": _request(meta),
    }


def _request(meta: Mapping[str, Any]) -> dict[str, str]:
    """What an HTTP client said about the request (REQUEST_ANNOTATIONS), by field name."""
    annotations = meta.get("annotations") or {}
    return {field: str(annotations[key]) for field, key in REQUEST_ANNOTATIONS.items() if annotations.get(key)}


def turn_start(state: TranscriptState, turn: int | None) -> int:
    """The seq where a Conversation turn starts (0 for an Investigation or an unknown turn)."""
    if turn is None:
        return 0
    return state.turns.get(turn, len(state.records))


def _text(content: Any) -> str:
    """A message's content as text (OpenAI content may be a list of parts)."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def asks_of(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """What the person asked in a run, as (shown, prefix) pairs in order: a user message of the
    transcript that starts with `prefix` is shown as `shown`, the prompt around it (sections
    instructions, reminders, the time) behind a toggle. A Conversation's turns are its asks; an
    Investigation's ask is its title, description and question."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Conversation" or "turns" in spec:
        return [(str(t.get("ask") or ""), str(t.get("ask") or "")) for t in spec.get("turns") or [] if t.get("ask")]
    title = str(spec.get("title") or "")
    if not title:
        return []
    shown = "\n\n".join(str(p) for p in (title, spec.get("description"), spec.get("question")) if p)
    # how the operator's prompt opens an Investigation (operator/agent/prompts.py)
    return [(shown, f"Investigate this {spec.get('source') or 'kubernetes'} issue: {title}")]


def timeline(state: TranscriptState, since: int = 0, asks: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """The records from `since` on as items a person reads, each with its `seq`: `turn`,
    `user`, `assistant`, `tool_call` (with `status`, `description`, `output` once known),
    `approval`, `decision`, `tokens`, `compaction`, `answer`, `error`.

    With `asks` (`asks_of`), a user message that is a prompt built around an ask is shown as
    the ask (`text`), with the whole message as `prompt`."""
    items: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    next_ask = 0
    for seq, record in enumerate(state.records):
        if record["t"] == RecordType.MESSAGE and (record.get("message") or {}).get("role") == "user":
            content = _text((record.get("message") or {}).get("content"))
            item: dict[str, Any] = {"seq": seq, "kind": "user", "text": content}
            if next_ask < len(asks) and asks[next_ask][1] and content.startswith(asks[next_ask][1]):
                item["text"] = asks[next_ask][0]
                if content != item["text"]:
                    item["prompt"] = content
                next_ask += 1
            if seq >= since:
                items.append(item)
            continue
        if seq < since:
            continue
        if record["t"] == RecordType.MESSAGE:
            message = record.get("message") or {}
            role = message.get("role")
            if role == "assistant":
                text = _text(message.get("content"))
                if text.strip():
                    items.append({"seq": seq, "kind": "assistant", "text": text})
                for part in message.get("tool_calls") or []:
                    fn = part.get("function") or {}
                    call = {
                        "seq": seq,
                        "kind": "tool_call",
                        "id": str(part.get("id") or ""),
                        "name": str(fn.get("name") or "?"),
                        "params": call_arguments(fn.get("arguments")),
                        "status": "running",
                        "description": "",
                        "output": None,
                    }
                    calls[call["id"]] = call  # type: ignore[index]
                    items.append(call)
            elif role == "tool":
                call = calls.get(str(message.get("tool_call_id") or ""))  # type: ignore[assignment]
                if call is not None:
                    call["output"] = _text(message.get("content"))[:MAX_OUTPUT_CHARS]
        elif record["t"] == RecordType.TOOL_RESULT:
            call = calls.get(str(record.get("id") or ""))  # type: ignore[assignment]
            if call is not None:
                call["status"] = str(record.get("status") or "")
                call["description"] = str(record.get("description") or call["description"])
        elif record["t"] == RecordType.APPROVAL_NEEDED:
            pending = list(record.get("pending") or [])
            for p in pending:
                call = calls.get(str(p.get("toolCallId") or ""))  # type: ignore[assignment]
                if call is not None and call["status"] == "running":
                    call["status"] = "approval_required"
                    call["description"] = str(p.get("description") or "")
            items.append({"seq": seq, "kind": "approval", "pending": pending})
        elif record["t"] == RecordType.DECISION:
            items.append(
                {
                    "seq": seq,
                    "kind": "decision",
                    "id": record.get("id"),
                    "approved": bool(record.get("approved")),
                    "reason": record.get("reason"),
                }
            )
        elif record["t"] == RecordType.TOKENS:
            items.append(
                {
                    "seq": seq,
                    "kind": "tokens",
                    "promptTokens": int(record.get("promptTokens") or 0),
                    "completionTokens": int(record.get("completionTokens") or 0),
                    "totalTokens": int(record.get("totalTokens") or 0),
                    "cost": float(record.get("cost") or 0.0),
                }
            )
        elif record["t"] == RecordType.COMPACTION:
            items.append({"seq": seq, "kind": "compaction", "messages": len(record.get("messages") or [])})
        elif record["t"] == RecordType.TURN:
            items.append({"seq": seq, "kind": "turn", "index": int(record.get("index") or 0)})
        elif record["t"] == RecordType.ANSWER:
            text = str(record.get("text") or "")
            # The final assistant message usually *is* the answer: shown once, as the answer.
            last = next((i for i in reversed(items) if i["kind"] != "tokens"), None)
            if last is not None and last["kind"] == "assistant" and last["text"].strip() == text.strip():
                items.remove(last)
            items.append({"seq": seq, "kind": "answer", "text": text, "sections": record.get("sections")})
        elif record["t"] == RecordType.ERROR:
            items.append(
                {
                    "seq": seq,
                    "kind": "error",
                    "reason": str(record.get("reason") or ""),
                    "message": str(record.get("message") or ""),
                }
            )
    return items
