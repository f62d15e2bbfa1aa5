"""A read-only view of the messages in one chat-completions request.

Everything the scripted model knows about a conversation comes from the request itself (that is
what makes replay stateless): which step it is at, what the user asked, and which tool produced
which output — tool messages only carry a `tool_call_id`, so names and arguments are recovered
from the assistant messages that made the calls.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = ["Conversation", "ToolResult", "message_text"]


def message_text(content: Any) -> str:
    """The text of a message's `content`: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


@dataclass(frozen=True)
class ToolResult:
    """A tool message together with the call it answers."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    output: str


@dataclass(frozen=True)
class Conversation:
    messages: list[dict[str, Any]]

    @classmethod
    def from_request(cls, body: dict[str, Any]) -> Conversation:
        messages = body.get("messages")
        return cls([m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [])

    def _texts(self, role: str) -> list[str]:
        return [message_text(m.get("content")) for m in self.messages if m.get("role") == role]

    @property
    def system(self) -> str:
        """All system (and developer) messages, joined."""
        return "\n\n".join(
            message_text(m.get("content")) for m in self.messages if m.get("role") in ("system", "developer")
        )

    @property
    def first_user(self) -> str:
        users = self._texts("user")
        return users[0] if users else ""

    @property
    def last_user(self) -> str:
        users = self._texts("user")
        return users[-1] if users else ""

    @property
    def all_text(self) -> str:
        return "\n\n".join(message_text(m.get("content")) for m in self.messages)

    @property
    def assistant_count(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def assistant_count_this_turn(self) -> int:
        """Assistant messages after the last user message."""
        count = 0
        for message in reversed(self.messages):
            if message.get("role") == "user":
                break
            count += message.get("role") == "assistant"
        return count

    @property
    def key(self) -> str:
        """Identifies the conversation across requests: a hash of its first user message."""
        return hashlib.sha256(self.first_user.encode()).hexdigest()[:12]

    @cached_property
    def tool_results(self) -> list[ToolResult]:
        """Tool outputs in conversation order, with the name and arguments of their call."""
        calls: dict[str, tuple[str, dict[str, Any]]] = {}
        results: list[ToolResult] = []
        for message in self.messages:
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or []:
                    function = call.get("function") or {}
                    calls[str(call.get("id"))] = (
                        str(function.get("name", "")),
                        _parse_arguments(function.get("arguments")),
                    )
            elif message.get("role") == "tool":
                call_id = str(message.get("tool_call_id"))
                name, arguments = calls.get(call_id, (str(message.get("name", "")), {}))
                results.append(ToolResult(call_id, name, arguments, message_text(message.get("content"))))
        return results

    def results_of(self, tool: str | None = None) -> list[ToolResult]:
        """Tool results for calls to `tool` (all tools when None), newest first."""
        return [r for r in reversed(self.tool_results) if tool is None or r.name == tool]


def _parse_arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
