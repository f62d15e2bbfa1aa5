"""What the operator's watches ask the apiserver for: only Investigations that are not finished.

10,000 finished Investigations cost an operator that watches them all a list of every whole
object at each start and a memory of each for as long as it runs, for nothing: a finished run
has no work. The Investigation CRD declares `status.phase` a selectable field, so Kopf's list and
watch carry a field selector (`UNFINISHED_SELECTOR`) and the apiserver filters: a finished
Investigation is never sent, and one that finishes leaves the watch (a DELETED event with its
last unfinished version, which stops its daemon like a filter mismatch did). What must still
happen to finished Investigations, TTL deletion, has its own narrow watch (`ttl.py`); transcripts
go with their owner by garbage collection; schedules and alert routes list their own children.

Job mode keeps the full watch: Kopf removes its finalizer from a run's object when the daemon's
filter stops matching, which it can only see if it still receives the finished object.
Conversations are never finished (a turn can always be appended), so they are watched whole.
The initial lists are read in pages (`LIST_CHUNK`), so a start never holds one huge answer.
"""

from __future__ import annotations

import kopf

from lestrade.resources.constants import GROUP, INVESTIGATION_PLURAL
from lestrade.resources.investigation import UNFINISHED_SELECTOR

__all__ = ["LIST_CHUNK", "configure_selection"]

LIST_CHUNK = 500
"""Objects per page of a list at start: about 2.5 MB of JSON at most in flight at once."""


def configure_selection(settings: kopf.OperatorSettings, *, job_mode: bool) -> None:
    """Server-side selection and paged lists for Kopf's watches (module docstring)."""
    settings.watching.chunk_size = LIST_CHUNK
    if not job_mode:
        settings.watching.field_selectors[GROUP, INVESTIGATION_PLURAL] = UNFINISHED_SELECTOR
