"""Idle Conversations leave the operator's memory, as finished Investigations do.

A Conversation is never finished for good (a turn can be appended at any time), and whether it
has work compares its spec (what was asked) with its status (what was answered), which no field
selector can do. So the operator labels a Conversation with nothing to answer
`lestrade.dev/idle=<generation>` (`mark_idle`) and Kopf watches only Conversations without that
label (`IDLE_SELECTOR`, set in `selection.py`): an idle one leaves Kopf's watch (a DELETED
event, which stops its daemon) and 10,000 of them are never listed whole at a start.

Appending a turn changes the spec, so `metadata.generation`. `IdleWaker` watches the idle
Conversations' metadata only (PartialObjectMetadata: a few hundred bytes per object, none of
them kept) and removes the label from one whose generation no longer matches it; Kopf's watch
then receives the Conversation again and its daemon answers the turn. The label is written with
the resourceVersion the operator judged idle, so a turn appended in between fails the write
(the Conversation stays watched); removing a stale label is a plain patch (two replicas that
both remove it do no harm).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from lestrade.kube import Kube, is_conflict, is_not_found, resource_path
from lestrade.resources.constants import CONVERSATION_PLURAL
from lestrade.resources.keys import IDLE_LABEL
from lestrade.runs.views import RunView

__all__ = ["IDLE_LABEL", "IDLE_SELECTOR", "IdleWaker", "mark_idle"]

logger = logging.getLogger(__name__)

IDLE_SELECTOR = f"!{IDLE_LABEL}"
LIST_CHUNK = 500
RETRY_DELAY = 2.0  # seconds before listing again after a failed list or watch


async def mark_idle(kube: Kube, view: RunView) -> None:
    """Labels the Conversation idle at the generation and resourceVersion it was judged at."""
    meta = view.body.get("metadata") or {}
    if (meta.get("labels") or {}).get(IDLE_LABEL) == str(meta.get("generation")):
        return
    patch = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": {IDLE_LABEL: str(meta.get("generation"))},
        }
    }
    try:
        await kube.patch(resource_path(view.plural, view.ref.namespace, view.ref.name), patch, parse=False)
    except Exception as exc:
        if not (is_conflict(exc) or is_not_found(exc)):
            raise  # a conflict: it changed meanwhile (a new turn?) and stays watched


def _stale(meta: Mapping[str, Any]) -> bool:
    return (meta.get("labels") or {}).get(IDLE_LABEL) not in (None, str(meta.get("generation")))


class IdleWaker:
    """Removes the idle label from Conversations whose spec changed since it was set."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    async def follow(self, namespaces: Sequence[str] = ()) -> None:
        """Until cancelled: one metadata-only list-then-watch per namespace (or cluster-wide)."""
        paths = [resource_path(CONVERSATION_PLURAL, ns) for ns in namespaces] or [
            resource_path(CONVERSATION_PLURAL, None)
        ]
        tasks = [asyncio.create_task(self._follow(path), name=f"idle watch {path}") for path in paths]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, path: str) -> None:
        while True:
            try:
                version = await self._list(path)
                await self._watch(path, version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("idle Conversations watch of %s failed, listing again: %s", path, exc)
                await asyncio.sleep(RETRY_DELAY)  # a retry delay, not a synchronization

    async def _list(self, path: str) -> str:
        query: dict[str, Any] = {"limit": LIST_CHUNK, "labelSelector": IDLE_LABEL}
        while True:
            page = await self._kube.get_metadata(path, **query)
            for item in page.get("items") or []:
                await self._consider(item.get("metadata") or {})
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return str(meta.get("resourceVersion", ""))
            query["continue"] = meta["continue"]

    async def _watch(self, path: str, version: str) -> None:
        while True:  # each watch ends after the server's timeout; resume from the last version
            async for event in self._kube.watch(
                path, resource_version=version, metadata_only=True, labelSelector=IDLE_LABEL
            ):
                kind, meta = event.get("type"), (event.get("object") or {}).get("metadata") or {}
                if kind == "ERROR":
                    return  # e.g. 410 Gone: the version is too old, list again
                version = meta.get("resourceVersion", version)
                if kind in ("ADDED", "MODIFIED"):
                    await self._consider(meta)

    async def _consider(self, meta: Mapping[str, Any]) -> None:
        if not _stale(meta):
            return
        try:
            await self._kube.patch(
                resource_path(CONVERSATION_PLURAL, meta["namespace"], meta["name"]),
                {"metadata": {"labels": {IDLE_LABEL: None}}},
                parse=False,
            )
        except Exception as exc:
            if not is_not_found(exc):
                raise
