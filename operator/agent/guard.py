"""Catches a model going round in circles, before it burns the step budget.

Two symptoms, two rules. Repetition: the same tool with equivalent arguments (key order,
case, whitespace and empty values ignored) runs at most `repeat_limit` times; further calls are
refused with an error result that tells the model why, and a model that keeps asking after
being refused is stopped. No progress: a step whose tool results were *all* seen before adds
nothing; after `no_progress_steps` such steps in a row the model is told to change course or
answer, and after twice as many the run stops.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = ["LoopGuard", "call_signature"]

_MAX_REFUSALS = 2


def _normalize(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.lower().split())
    if isinstance(value, Mapping):
        return {
            str(k): _normalize(v)
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            if v not in (None, "", [], {})
        }
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    return value


def call_signature(name: str, params: Mapping[str, Any]) -> str:
    """Identity of a call for repetition purposes: tool name plus normalized arguments."""
    return name + ":" + json.dumps(_normalize(params), sort_keys=True, default=str)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


class LoopGuard:
    def __init__(self, repeat_limit: int, no_progress_steps: int) -> None:
        self.repeat_limit = max(repeat_limit, 1)
        self.no_progress_steps = max(no_progress_steps, 1)
        self._calls: Counter[str] = Counter()
        self._seen: set[str] = set()
        self._stale_steps = 0
        self.refusals = 0

    def seed(self, calls: Iterable[tuple[str, Mapping[str, Any]]], outputs: Iterable[str]) -> None:
        """Restores the state from a stored transcript (resumed runs)."""
        for name, params in calls:
            self._calls[call_signature(name, params)] += 1
        self._seen.update(_digest(o) for o in outputs)

    def refuse(self, name: str, params: Mapping[str, Any]) -> str | None:
        """An error text for the model if this call would be one repeat too many, else None."""
        n = self._calls[call_signature(name, params)]
        if n < self.repeat_limit:
            return None
        self.refusals += 1
        return (
            f"Loop guard: `{name}` already ran {n} times with these arguments and was not run "
            "again; its result will not change. Use the earlier results, try a different "
            "approach, or give your final answer."
        )

    def record_call(self, name: str, params: Mapping[str, Any]) -> None:
        self._calls[call_signature(name, params)] += 1

    @property
    def stuck(self) -> bool:
        """The model kept repeating after being refused: stop the run."""
        return self.refusals >= _MAX_REFUSALS

    def record_step(self, outputs: list[str]) -> Literal["ok", "warn", "stop"]:
        """Registers one step's tool results; says whether to warn the model or stop."""
        digests = [_digest(o) for o in outputs]
        stale = bool(digests) and all(d in self._seen for d in digests)
        self._seen.update(digests)
        self._stale_steps = self._stale_steps + 1 if stale else 0
        if self._stale_steps >= 2 * self.no_progress_steps:
            return "stop"
        if self._stale_steps == self.no_progress_steps:
            return "warn"
        return "ok"

    @property
    def stale_steps(self) -> int:
        return self._stale_steps
