"""Context-store messages (reference 004: role + typed parts) and the transcript's chat
messages (OpenAI's shape, what the model gets), both ways.

A message appended through `/v1` is stored as a transcript `message` record whose `message` is
what the model will see on the Conversation's next turn, and whose `context` keeps the client's
own form (parts, token count, metadata, time) so `/v1` gives it back verbatim. Messages the
operator wrote (turns asked through `spec.turns` or a chat endpoint) have no `context`: their
parts are derived from the chat message.

Part types that map onto the chat format: `text` (content), `tool_call` (`name`, `payload`,
optional `id`: an assistant tool call), `tool_result` (`tool_call_id`, `output`: the content of
a `tool` message), `reasoning` (`text`: the assistant's reasoning). Any other part type is kept
in the log and given to the model as its JSON, in the content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lestrade.context.tokens import count_messages

__all__ = [
    "Part",
    "ContextMessage",
    "MAX_MESSAGE_BYTES",
    "to_chat",
    "parts_of",
    "estimate",
]

MAX_MESSAGE_BYTES = 256 * 1024
"""A stored message must fit one transcript record (a ConfigMap chunk holds 512 KiB)."""

Role = Literal["system", "user", "assistant", "tool"]


class Part(BaseModel):
    """One typed part; fields besides `type` depend on it and are kept as sent."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1, max_length=64)


class ContextMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role
    parts: list[Part] = Field(min_length=1, max_length=1000)
    token_count: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)


def to_chat(role: str, parts: Sequence[Mapping[str, Any]], seq: int) -> dict[str, Any]:
    """The chat message the model gets for a stored message (`seq` names its tool calls when
    the client gave them no id)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    call_id: str | None = None
    for index, part in enumerate(parts):
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(part.get("text", "")))
        elif kind == "tool_call" and role == "assistant":
            calls.append(
                {
                    "id": str(part.get("id") or f"ctx-{seq}-{index}"),
                    "type": "function",
                    "function": {"name": str(part.get("name") or ""), "arguments": _text(part.get("payload") or {})},
                }
            )
        elif kind == "tool_result" and role == "tool":
            call_id = str(part.get("tool_call_id") or part.get("id") or "")
            texts.append(_text(part.get("output", part.get("text", ""))))
        elif kind == "reasoning":
            reasoning.append(_text(part.get("text", "")))
        else:
            texts.append(_text(dict(part)))
    message: dict[str, Any] = {"role": role, "content": "\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    if role == "tool":
        message["tool_call_id"] = call_id or f"ctx-{seq}"
    return message


def parts_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The parts of a chat message (one the operator wrote, or a compacted one)."""
    parts: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        parts.append({"type": "reasoning", "text": str(message["reasoning_content"])})
    content = message.get("content")
    if message.get("role") == "tool":
        parts.append({"type": "tool_result", "tool_call_id": message.get("tool_call_id"), "output": content})
    elif isinstance(content, str):
        if content:
            parts.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for piece in content:
            if isinstance(piece, dict) and piece.get("type") == "text":
                parts.append({"type": "text", "text": str(piece.get("text") or "")})
            elif isinstance(piece, dict):
                parts.append(dict(piece))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        try:
            payload = json.loads(fn.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            payload = fn.get("arguments")
        parts.append({"type": "tool_call", "id": call.get("id"), "name": fn.get("name"), "payload": payload})
    return parts


def estimate(message: Mapping[str, Any]) -> int:
    """Tokens of one chat message, counted as the operator counts its window."""
    return count_messages([message])
