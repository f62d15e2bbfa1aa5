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
Conversations are never finished (a turn can always be appended), so the operator labels the
idle ones and Kopf's watch leaves them out by a label selector (`idle.py`).
Core Events are watched for their Warnings only (`WARNING_EVENTS`, the alert source of
`triggers/event_source.py`): the Normal ones (every run posts two) are never sent to the operator,
whose one thread would otherwise decode and dispatch each through Kopf for nothing.
The initial lists are read in pages (`LIST_CHUNK`), so a start never holds one huge answer.

The selector needs this version's CRD (`selectableFields`); with an older one the apiserver
refuses the list ("field label not supported"), so the operator first reads the CRD
(`crd_selects_phase`) and, if it cannot select, watches whole objects as before and says so.
"""

from __future__ import annotations

import logging

import kopf

from lestrade.kube import Kube, api_path
from lestrade.operator.runs.idle import IDLE_SELECTOR
from lestrade.resources.constants import CONVERSATION_PLURAL, GROUP, INVESTIGATION_PLURAL
from lestrade.resources.investigation import UNFINISHED_SELECTOR

__all__ = ["LIST_CHUNK", "WARNING_EVENTS", "configure_selection", "crd_selects_phase"]

logger = logging.getLogger(__name__)

LIST_CHUNK = 500
"""Objects per page of a list at start: about 2.5 MB of JSON at most in flight at once."""

WARNING_EVENTS = "type=Warning"
"""The field selector of the core Events watch (a selector core Events support everywhere)."""


async def crd_selects_phase(kube: Kube, crd: str = f"{INVESTIGATION_PLURAL}.{GROUP}") -> bool:
    """Whether the installed Investigation CRD lets the apiserver select by `status.phase`."""
    try:
        found = await kube.get(api_path("apiextensions.k8s.io/v1", "customresourcedefinitions", name=crd))
    except Exception as exc:
        logger.warning("cannot read the CRD %s (%s): watching every Investigation whole", crd, exc)
        return False
    paths = {f.get("jsonPath") for v in found["spec"].get("versions") or [] for f in v.get("selectableFields") or []}
    if ".status.phase" not in paths:
        logger.warning(
            "the CRD %s is older than this operator (no selectable status.phase; apply "
            "this version's CRDs): watching every Investigation whole",
            crd,
        )
        return False
    return True


def configure_selection(
    settings: kopf.OperatorSettings,
    *,
    job_mode: bool,
    selectable: bool = True,
    idle_conversations: bool = True,
) -> None:
    """Server-side selection (when the CRD allows it) and paged lists for Kopf's watches."""
    settings.watching.chunk_size = LIST_CHUNK
    settings.watching.field_selectors["", "v1", "events"] = WARNING_EVENTS
    if selectable and not job_mode:
        settings.watching.field_selectors[GROUP, INVESTIGATION_PLURAL] = UNFINISHED_SELECTOR
    if idle_conversations and not job_mode:
        settings.watching.label_selectors[GROUP, CONVERSATION_PLURAL] = IDLE_SELECTOR
