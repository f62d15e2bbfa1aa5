"""Token counting (tiktoken, offline), shared by the operator and the API.

Counts are estimates made locally before a call, so the loop can decide to truncate or compact
without asking the provider; the provider's own `usage` is reported next to them. The per-role
breakdown uses reference 000's field names and meanings: `tools_tokens` are the tool
definitions, `tools_to_call_tokens` the assistant's tool call requests, `assistant_tokens` the
assistant's text, and `other_tokens` every other message type (tool results among them).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import tiktoken

__all__ = [
    "BREAKDOWN_KEYS",
    "count_text",
    "count_messages",
    "token_breakdown",
    "token_breakdown_if_cheap",
    "tools_tokens",
    "truncate_to_tokens",
]

_MESSAGE_OVERHEAD = 3  # role and framing tokens the chat format adds to every message

BREAKDOWN_KEYS = (
    "total_tokens",
    "tools_tokens",
    "system_tokens",
    "user_tokens",
    "tools_to_call_tokens",
    "assistant_tokens",
    "other_tokens",
)


@functools.lru_cache(maxsize=32)
def _encoding(model: str) -> tiktoken.Encoding:
    name = model.split("/")[-1]
    try:
        return tiktoken.encoding_for_model(name)
    except KeyError:
        return tiktoken.get_encoding("cl100k_base")


_COUNTS: dict[tuple[int, int, str], int] = {}
"""Tokens of texts counted before, by (hash, length, model): a history is counted again before
and after every model call, and only its newest messages were never counted. Keyed by the
hash, not the text, so the cache does not keep large tool outputs alive."""
_COUNTS_MAX = 16384


class _TooMuchNew(Exception):
    """Counting would encode more new text than the caller allows on its thread."""


def _count(text: str, model: str, new_budget: list[int] | None = None) -> int:
    key = (hash(text), len(text), model)
    known = _COUNTS.get(key)
    if known is not None:
        return known
    if new_budget is not None:
        new_budget[0] -= len(text)
        if new_budget[0] < 0:
            raise _TooMuchNew
    count = len(_encoding(model).encode(text, disallowed_special=()))
    if len(_COUNTS) >= _COUNTS_MAX:
        try:  # the oldest first (dicts keep insertion order); another thread may race us here
            del _COUNTS[next(iter(_COUNTS))]
        except (KeyError, RuntimeError, StopIteration):
            pass
    _COUNTS[key] = count
    return count


def count_text(text: str, model: str = "") -> int:
    """Tokens of a string with the model's tokenizer (cl100k_base when unknown)."""
    return _count(text, model) if text else 0


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: count the text ones
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return json.dumps(content, default=str)


def tools_tokens(tools: Sequence[Mapping[str, Any]] | None, model: str = "") -> int:
    """Tokens of the tool definitions as sent (their compact JSON)."""
    return count_text(_tools_text(tools), model) if tools else 0


_TOOLS_TEXTS: dict[int, tuple[Sequence[Mapping[str, Any]], str]] = {}
"""The compact JSON of tool definition lists counted lately, by the list's identity (the list is
kept, so its id cannot be reused meanwhile): a run counts the same list before and after every
model call, and dumping it costs more than counting it from the cache."""


def _tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    known = _TOOLS_TEXTS.get(id(tools))
    if known is not None and known[0] is tools:
        return known[1]
    text = json.dumps(list(tools), separators=(",", ":"))
    if isinstance(tools, tuple):  # only what cannot change under us
        if len(_TOOLS_TEXTS) >= 512:
            _TOOLS_TEXTS.clear()
        _TOOLS_TEXTS[id(tools)] = (tools, text)
    return text


def token_breakdown(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
) -> dict[str, int]:
    """Reference 000's `metadata.tokens`: the window's tokens by role."""
    return _breakdown(messages, tools, model, None)


def token_breakdown_if_cheap(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
    *,
    new_chars: int = 8192,
) -> dict[str, int] | None:
    """`token_breakdown`, or None when it would encode more than `new_chars` characters never
    counted before (what was counted meanwhile is kept): an event loop counts a history whose
    older messages were counted at the previous call on its own thread, and hands only a
    large new text (a tool's output) to another."""
    try:
        return _breakdown(messages, tools, model, [new_chars])
    except _TooMuchNew:
        return None


def _breakdown(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    model: str,
    new_budget: list[int] | None,
) -> dict[str, int]:
    def count(text: str) -> int:
        return _count(text, model, new_budget) if text else 0

    out = dict.fromkeys(BREAKDOWN_KEYS, 0)
    out["tools_tokens"] = count(_tools_text(tools)) if tools else 0
    for msg in messages:
        role = msg.get("role")
        n = count(_content_text(msg.get("content"))) + _MESSAGE_OVERHEAD
        if role in ("system", "developer"):
            out["system_tokens"] += n
        elif role == "user":
            out["user_tokens"] += n
        elif role == "assistant":
            out["assistant_tokens"] += n
            calls = msg.get("tool_calls") or []
            if calls:
                out["tools_to_call_tokens"] += count(json.dumps(calls, separators=(",", ":"), default=str))
        else:
            out["other_tokens"] += n
    out["total_tokens"] = sum(v for k, v in out.items() if k != "total_tokens")
    return out


def count_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
) -> int:
    """Total tokens of a request's messages and tool definitions."""
    return token_breakdown(messages, tools, model)["total_tokens"]


def truncate_to_tokens(text: str, budget: int, model: str = "") -> str:
    """The longest prefix of `text` that has at most `budget` tokens (on a token boundary)."""
    enc = _encoding(model)
    tokens = enc.encode(text, disallowed_special=())
    if len(tokens) <= budget:
        return text
    prefix = enc.decode(tokens[: max(budget, 0)])
    return prefix.rstrip("\ufffd")  # a cut inside a multi-byte character decodes to U+FFFD
