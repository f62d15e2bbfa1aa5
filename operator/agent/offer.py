"""Which tool schemas a model call carries: the registry's offer for what the history opened.

A deferred toolset (`tools.base`) is offered from the model call after the one that opened it,
and stays offered for the rest of the run. What is open is read from the messages, never kept
beside them, so a run resumed after a restart, or a transcript replayed, gets the same offer.
A compaction can drop the call that opened a toolset; the compacted history then ends with an
engine note naming the toolsets that stay open (stored with the compaction like the summary).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lestrade.context.window import NOTE_PREFIX
from lestrade.operator.tools.base import ToolRegistry

__all__ = ["OPEN_NOTE", "opened_toolsets", "keep_open"]

OPEN_NOTE = NOTE_PREFIX + " Toolsets still open: "


def opened_toolsets(registry: ToolRegistry, messages: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The deferred toolsets `messages` opened: by their calls, or named by a compaction's note
    (only names of the run's deferred toolsets count, whoever wrote the note)."""
    deferred = {ts.name for ts in registry.deferred()}
    named: set[str] = set()
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.startswith(OPEN_NOTE):
            named |= {n.strip() for n in content[len(OPEN_NOTE) :].rstrip(".").split(",")} & deferred
    return registry.opened_in(messages) | named


def keep_open(registry: ToolRegistry, messages: list[dict[str, Any]], opened: frozenset[str]) -> list[dict[str, Any]]:
    """`messages` (a compacted history) with a note naming the toolsets of `opened` it no longer
    opens itself, so they stay offered, now and after a restart."""
    missing = opened - opened_toolsets(registry, messages)
    if not missing:
        return messages
    return [*messages, {"role": "user", "content": OPEN_NOTE + ", ".join(sorted(missing)) + "."}]
