"""The model's context window; token counting itself is `lestrade.context.tokens` (shared with
the API, which reports the same counts)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lestrade.context.tokens import (
    BREAKDOWN_KEYS,
    count_messages,
    count_text,
    token_breakdown,
    token_breakdown_if_cheap,
    tools_tokens,
    truncate_to_tokens,
)
from lestrade.operator.agent.limits import Limits

__all__ = [
    "ContextLimits",
    "BREAKDOWN_KEYS",
    "count_text",
    "count_messages",
    "token_breakdown",
    "window_breakdown",
    "tools_tokens",
    "context_limits",
    "truncate_to_tokens",
]


async def window_breakdown(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, model: str
) -> dict[str, int]:
    """`token_breakdown` of a run's window, counted on the event loop when all but a little of
    it was counted before (the usual case: the history of the previous call plus one model
    turn), in a thread when a large new text must be encoded. Each thread hop costs the loop
    more than counting from the cache, and a burst of runs makes two per model call."""
    cheap = token_breakdown_if_cheap(messages, tools, model)
    if cheap is not None:
        return cheap
    return await asyncio.to_thread(token_breakdown, messages, tools, model)


_DEFAULT_WINDOW = 128_000
_DEFAULT_OUTPUT = 4_096
_OUTPUT_CAP = 16_384


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
    window = limits.context_window or info.get("max_input_tokens") or info.get("max_tokens") or _DEFAULT_WINDOW
    explicit = limits.max_output_tokens or settings.get("max_tokens")
    if explicit:
        return ContextLimits(int(window), int(explicit))
    output = min(int(info.get("max_output_tokens") or _DEFAULT_OUTPUT), _OUTPUT_CAP)
    return ContextLimits(int(window), max(min(output, int(window) // 4), 1))
