"""The knobs that bound one agent run: steps, time, retries, context window, loop guard.

They live in one frozen object so the operator can build it from a resource's spec and a test
can shrink everything (a 2,000-token window, a 0.2 s tool timeout) without touching the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """Bounds of one run. `None` means "derive it" (from the model's info) or "no bound"."""

    max_steps: int = 20
    """Model calls per run; the last one must answer (tool_choice none)."""

    timeout: float | None = 900.0
    """Seconds for the whole run (model calls and tools; time spent in the consumer counts)."""

    tool_timeout: float = 120.0
    """Seconds for one tool call; a call over it becomes an error result the model sees."""

    model_timeout: float = 180.0
    """Seconds for one model request (a hung provider becomes a retried `ModelTimeout`)."""

    max_retries: int = 3
    """Retries of one model call on 429, 5xx, timeouts and connection errors."""

    backoff_base: float = 1.0
    """First retry delay in seconds; doubled on every further retry (unless Retry-After says)."""

    backoff_max: float = 60.0
    """Upper bound of one retry delay, also for a server's Retry-After."""

    context_window: int | None = None
    """Override of the model's context window (tokens); default from litellm's model info."""

    max_output_tokens: int | None = None
    """`max_tokens` sent with every call; default: the model's, capped at 16,384."""

    tool_output_ratio: float = 0.25
    """Largest share of the input window one tool result may take before it is truncated."""

    compaction_ratio: float = 0.85
    """Compact the history when it passes this share of the input window."""

    keep_recent_turns: int = 2
    """Assistant turns (with their tool results) kept verbatim by compaction."""

    compaction_policy: str = "summary"
    """How to compact: `summary` (a model-written summary of older messages), `last_n` (keep
    only the newest `compaction_keep` messages), `skip_parts` (drop the parts named in
    `compaction_skip_kinds` from all but the newest `compaction_keep` messages) or `manual`
    (never compact automatically) — the context-store policies."""

    compaction_keep: int = 20
    """Messages kept whole by `last_n` and `skip_parts`."""

    compaction_skip_kinds: tuple[str, ...] = ()
    """Part kinds `skip_parts` drops from older messages: tool_result, tool_call, reasoning."""

    repeat_limit: int = 3
    """An identical tool call (same tool, equivalent arguments) runs at most this many times."""

    no_progress_steps: int = 3
    """Steps in a row whose tool results were all seen before: warn the model, stop at twice."""
