"""Following a run as the operator makes progress: the object from the shared watch, its
transcript read when the object changes.

A request that waits for an answer, and every SSE stream, follows its resource here. Nothing
opens a watch of its own: each follower subscribes to the kind's `SharedWatch`, and the
transcript (ConfigMaps) is read again only when the object's resourceVersion changed, once per
version for all followers of that object (`TranscriptCache`), since the operator writes the
transcript before the status that announces it.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from lestrade.api.base.watch import SharedWatch, WatchEvent
from lestrade.kube import ApiException, Kube, is_not_found, resource_path
from lestrade.runs.transcript import Transcript, TranscriptState
from lestrade.runs.views import ObjectRef, view_of

__all__ = ["Snapshot", "TranscriptCache", "Follower", "ResourceGone", "RECHECK_SECONDS"]

RECHECK_SECONDS = 5.0

# An object's name (RFC 1123 subdomain): anything else cannot name one, and must never reach a URL
# path — an empty name there reads the whole list, a "/" another resource.
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
"""How often a quiet follower looks at the watch's cache for a version it may have missed."""


class ResourceGone(Exception):
    """The followed resource was deleted."""


@dataclass(frozen=True)
class Snapshot:
    """One version of a followed resource with its transcript as stored at that moment."""

    object: dict[str, Any]
    transcript: TranscriptState

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.object.get("status") or {})


class TranscriptCache:
    """The decoded transcript of recently followed resources, per resourceVersion; concurrent
    readers of one version share one read. The read is a task of its own, so a reader that
    goes away (a client hangs up) does not cancel it for the others."""

    def __init__(self, kube: Kube, size: int = 256) -> None:
        self._kube = kube
        self._size = size
        self._entries: OrderedDict[str, tuple[str, asyncio.Task[TranscriptState]]] = OrderedDict()

    async def get(self, obj: dict[str, Any]) -> TranscriptState:
        meta = obj["metadata"]
        uid, version = meta["uid"], meta.get("resourceVersion", "")
        entry = self._entries.get(uid)
        if entry is None or entry[0] != version:
            ref = view_of(obj).ref
            task = asyncio.create_task(
                Transcript(self._kube, ref.namespace, ref.owner, requester=ref.requester).load(),
                name=f"transcript {ref.name}",
            )
            task.add_done_callback(lambda done: self._forget_failed(uid, done))
            entry = self._entries[uid] = (version, task)
            self._entries.move_to_end(uid)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return await asyncio.shield(entry[1])

    def _forget_failed(self, uid: str, task: asyncio.Task[TranscriptState]) -> None:
        if task.cancelled() or task.exception() is not None:  # retrieved: no "never retrieved"
            entry = self._entries.get(uid)
            if entry is not None and entry[1] is task:
                del self._entries[uid]


class Follower:
    """Snapshots of one resource, each time it changes."""

    def __init__(self, kube: Kube, watches: dict[str, SharedWatch], cache: TranscriptCache) -> None:
        self._kube = kube
        self._watches = watches
        self._cache = cache

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none by that name (a name that cannot be one included)."""
        if not isinstance(name, str) or not _OBJECT_NAME.fullmatch(name):
            return None
        try:
            return await self._kube.get(resource_path(plural, namespace, name))
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise

    async def transcript(self, obj: dict[str, Any]) -> TranscriptState:
        """The transcript of this version of the object."""
        return await self._cache.get(obj)

    async def snapshots(self, ref: ObjectRef | tuple[str, str, str]) -> AsyncIterator[Snapshot]:
        """The current snapshot, then one per change, until the caller stops iterating;
        raises ResourceGone when the object is deleted."""
        plural, namespace, name = (ref.plural, ref.namespace, ref.name) if isinstance(ref, ObjectRef) else ref
        async with self._watches[plural].subscribe() as queue:
            # Subscribed first, read second: no change between the two can be missed.
            current = await self.get(plural, namespace, name)
            if current is None:
                raise ResourceGone(f"{plural}/{name} not found in namespace {namespace}")
            version = current["metadata"].get("resourceVersion")
            yield Snapshot(current, await self._cache.get(current))
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), RECHECK_SECONDS)
                except TimeoutError:
                    # A subscriber that fell behind loses its oldest events (SharedWatch); the
                    # watch's own cache still has the newest version of every object.
                    cached = self._watches[plural].objects.get((namespace, name))
                    if cached is None:
                        continue
                    event = WatchEvent("MODIFIED", cached)
                meta = event.object.get("metadata") or {}
                if meta.get("name") != name or meta.get("namespace") != namespace:
                    continue
                if event.type == "DELETED":
                    raise ResourceGone(f"{plural}/{name} was deleted")
                if not _newer(meta.get("resourceVersion"), version):
                    continue  # a version older than (or as old as) the one already read
                version = meta.get("resourceVersion")
                # Versions that arrived meanwhile are skipped: the newest one says it all.
                while not queue.empty():
                    newer = queue.get_nowait()
                    newer_meta = newer.object.get("metadata") or {}
                    if newer_meta.get("name") == name and newer_meta.get("namespace") == namespace:
                        if newer.type == "DELETED":
                            raise ResourceGone(f"{plural}/{name} was deleted")
                        if _newer(newer_meta.get("resourceVersion"), version):
                            event, version = newer, newer_meta.get("resourceVersion")
                yield Snapshot(event.object, await self._cache.get(event.object))


def _newer(candidate: str | None, current: str | None) -> bool:
    """Whether resourceVersion `candidate` comes after `current`. Versions are opaque in
    general, but the apiserver's are etcd revisions: compare them as numbers when they are."""
    if candidate == current:
        return False
    if candidate and current and candidate.isdigit() and current.isdigit():
        return int(candidate) > int(current)
    return True
