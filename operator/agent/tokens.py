"""Token counting (tiktoken, offline) and the model's context window.

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
from dataclasses import dataclass
from typing import Any

import tiktoken

from lestrade.operator.agent.limits import Limits

__all__ = [
    "ContextLimits",
    "BREAKDOWN_KEYS",
    "count_text",
    "count_messages",
    "token_breakdown",
    "tools_tokens",
    "context_limits",
    "truncate_to_tokens",
]

_MESSAGE_OVERHEAD = 3  # role and framing tokens the chat format adds to every message
_DEFAULT_WINDOW = 128_000
_DEFAULT_OUTPUT = 4_096
_OUTPUT_CAP = 16_384

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


@functools.lru_cache(maxsize=8192)
def _count(text: str, model: str) -> int:
    return len(_encoding(model).encode(text, disallowed_special=()))


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
    return count_text(json.dumps(list(tools), separators=(",", ":")), model) if tools else 0


def token_breakdown(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
) -> dict[str, int]:
    """Reference 000's `metadata.tokens`: the window's tokens by role."""
    out = dict.fromkeys(BREAKDOWN_KEYS, 0)
    out["tools_tokens"] = tools_tokens(tools, model)
    for msg in messages:
        role = msg.get("role")
        n = count_text(_content_text(msg.get("content")), model) + _MESSAGE_OVERHEAD
        if role in ("system", "developer"):
            out["system_tokens"] += n
        elif role == "user":
            out["user_tokens"] += n
        elif role == "assistant":
            out["assistant_tokens"] += n
            calls = msg.get("tool_calls") or []
            if calls:
                out["tools_to_call_tokens"] += count_text(
                    json.dumps(calls, separators=(",", ":"), default=str), model
                )
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


@dataclass(frozen=True)
class ContextLimits:
    """The model's context window and the `max_tokens` we reserve for its output."""

    window: int
    max_output: int

    @property
    def input_budget(self) -> int:
        return max(self.window - self.max_output, 1)


def _model_info(model: str) -> Mapping[str, Any]:
    import litellm  # deferred: importing litellm takes seconds, counting does not need it

    try:
        return litellm.get_model_info(model) or {}
    except Exception:  # unknown models raise; the defaults apply
        return {}


def context_limits(settings: Mapping[str, Any], limits: Limits) -> ContextLimits:
    """Window from `Limits.context_window` or litellm's model info; output from limits,
    the model's `max_tokens` setting, or its info (capped), never more than a quarter of a
    small window unless set explicitly."""
    info = _model_info(str(settings.get("model", "")))
    window = (
        limits.context_window
        or info.get("max_input_tokens")
        or info.get("max_tokens")
        or _DEFAULT_WINDOW
    )
    explicit = limits.max_output_tokens or settings.get("max_tokens")
    if explicit:
        return ContextLimits(int(window), int(explicit))
    output = min(int(info.get("max_output_tokens") or _DEFAULT_OUTPUT), _OUTPUT_CAP)
    return ContextLimits(int(window), max(min(output, int(window) // 4), 1))
