"""The context window's policies and the window the model gets next.

Both the operator's agent loop and the context-store API call these: the loop before every
model call (`over_budget`, then `compact_without_model` for `last_n` and `skip_parts`), the API
for `GET /v1/contexts/:id/context` (`plan_window`, which chains the same two). Compaction only
changes what the model sees; the raw messages stay in the transcript.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lestrade.context.tokens import count_messages
from lestrade.resources.conversation import ContextSettings

__all__ = [
    "NOTE_PREFIX",
    "DEFAULT_KEEP",
    "DEFAULT_TRIGGER_RATIO",
    "PolicyPlan",
    "policy_of",
    "is_note",
    "latest_ask_index",
    "over_budget",
    "compact_without_model",
    "Window",
    "plan_window",
]

NOTE_PREFIX = "[lestrade]"
"""Starts every user-role message the engine adds itself (summary, loop guard, answer-now)."""

DEFAULT_KEEP = 20
"""Messages `last_n` and `skip_parts` keep whole when the policy gives no limit."""

DEFAULT_TRIGGER_RATIO = 0.7
"""Share of the budget at which compaction starts (reference 004's default)."""

_OMITTED = NOTE_PREFIX + " (tool output omitted by compaction; the transcript keeps it)"


@dataclass(frozen=True)
class PolicyPlan:
    """A compaction policy resolved to what the engine needs."""

    policy: str
    """summary (the operator's model-written default), last_n, skip_parts or manual."""
    keep: int
    skip_kinds: tuple[str, ...]


def policy_of(context: ContextSettings | None) -> PolicyPlan:
    """The policy a Conversation's `spec.context` asks for (the default: a summary)."""
    policy = context.compaction if context is not None else None
    if policy is None:
        return PolicyPlan("summary", DEFAULT_KEEP, ())
    return PolicyPlan(policy.policy, policy.limit or DEFAULT_KEEP, tuple(policy.skip_kinds or ()))


def is_note(message: Mapping[str, Any]) -> bool:
    """A user-role message the engine added (summary, loop guard, answer-now), not the user."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(NOTE_PREFIX)


def latest_ask_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the last message the user wrote."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user" and not is_note(messages[i]):
            return i
    return None


def over_budget(used_tokens: int, budget: int, ratio: float) -> bool:
    """Compaction is due: the window holds more than `ratio` of `budget` tokens."""
    return used_tokens > ratio * budget


def _head(messages: Sequence[Mapping[str, Any]]) -> int:
    head = 0
    while head < len(messages) and messages[head].get("role") in ("system", "developer"):
        head += 1
    return head


def _drop_orphans(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results whose call is no longer in the history would be rejected by providers."""
    calls = {c.get("id") for m in messages for c in m.get("tool_calls") or []}
    return [m for m in messages if m.get("role") != "tool" or m.get("tool_call_id") in calls]


def compact_without_model(
    messages: Sequence[dict[str, Any]], policy: str, keep: int, skip_kinds: Sequence[str] = ()
) -> list[dict[str, Any]] | None:
    """The history after a `last_n` or `skip_parts` compaction (no model call), or None when
    the policy would change nothing. The system prompt and the user's latest ask always stay."""
    head = _head(messages)
    body = list(messages[head:])
    if len(body) <= keep:
        return None
    old, recent = body[: len(body) - keep], body[len(body) - keep :]
    ask = latest_ask_index(body)
    if policy == "last_n":
        kept = recent
        if ask is not None and ask < len(old):
            kept = [body[ask], *recent]
        result = [*messages[:head], *_drop_orphans(kept)]
    elif policy == "skip_parts":
        kinds = set(skip_kinds)
        dropped_calls: set[str] = set()
        slimmed: list[dict[str, Any]] = []
        for message in old:
            message = dict(message)
            if "reasoning" in kinds:
                for key in ("reasoning_content", "thinking_blocks"):
                    message.pop(key, None)
            if "tool_call" in kinds and message.get("tool_calls"):
                dropped_calls |= {c.get("id") for c in message["tool_calls"]}
                message.pop("tool_calls")
                if not message.get("content"):
                    continue
            if message.get("role") == "tool":
                if message.get("tool_call_id") in dropped_calls:
                    continue
                if "tool_result" in kinds:
                    message["content"] = _OMITTED
            slimmed.append(message)
        result = [*messages[:head], *slimmed, *recent]
    else:
        return None
    return None if result == list(messages) else result


@dataclass(frozen=True)
class Window:
    """What the model gets next from a history, and whether it is still too big."""

    messages: list[dict[str, Any]]
    used_tokens: int
    needs_compaction: bool
    compacted: bool
    """The policy changed the history (last_n or skip_parts applied)."""


def plan_window(
    messages: Sequence[dict[str, Any]], plan: PolicyPlan, budget: int, ratio: float, model: str = ""
) -> Window:
    """The window a model call would start from, as the operator's loop builds it: when the
    history passes `ratio` of `budget`, `last_n` and `skip_parts` apply at once; `manual` and
    `summary` (a model call the operator makes while answering a turn) leave it as it is, so
    the window still `needs_compaction`."""
    history = list(messages)
    used = count_messages(history, None, model)
    compacted = False
    if over_budget(used, budget, ratio) and plan.policy in ("last_n", "skip_parts"):
        smaller = compact_without_model(history, plan.policy, plan.keep, plan.skip_kinds)
        if smaller is not None:
            history, compacted = smaller, True
            used = count_messages(history, None, model)
    return Window(history, used, over_budget(used, budget, ratio), compacted)
