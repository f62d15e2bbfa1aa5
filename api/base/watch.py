"""One shared watch per resource kind, fanned out to any number of subscribers.

Every SSE client and every request that waits for a resource reads from this cache; the API
never opens a watch per client, so a hundred open streams cost the apiserver one watch. The
watch is a task in the API's event loop on the shared request layer (`lestrade.kube`); no
thread per watch. Subscribers get an `asyncio.Queue` each.

The cache holds every run of the cluster (the console lists finished ones too), so it keeps
each object without what no reader of the API uses (`slim`: the apiserver's managedFields and
kubectl's last-applied copy, together often as large as the rest), and lists page by page
(`LIST_CHUNK`) so a start with 10,000 objects never holds one huge answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

from lestrade.kube import Kube, api_path
from lestrade.resources import GROUP, VERSION

__all__ = ["WatchEvent", "SharedWatch", "slim"]

log = logging.getLogger(__name__)

RETRY_DELAY = 2.0
"""Seconds before listing again after a failure (CRD missing, apiserver restarting)."""

LIST_CHUNK = 500
"""Objects per page of the initial list."""

_UNREAD_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without the parts no reader of the API uses (module docstring); in place."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in _UNREAD_ANNOTATIONS:
                annotations.pop(key, None)
    return obj


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    object: dict[str, Any]


class SharedWatch:
    """List-then-watch of one custom resource (all namespaces), restarted on expiry or error."""

    def __init__(self, kube: Kube, plural: str, *, group: str = GROUP, version: str = VERSION) -> None:
        self._kube = kube
        self.plural = plural
        self._path = api_path(f"{group}/{version}", plural)
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._subscribers: set[asyncio.Queue[WatchEvent]] = set()
        self._task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()
        self.last_error: str | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch {self.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[WatchEvent]]:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue(maxsize=1000)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    def _publish(self, event: WatchEvent) -> None:
        slim(event.object)
        meta = event.object.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event.type == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = event.object
        for queue in list(self._subscribers):
            if queue.full():  # a stuck client loses its oldest event, not everyone's stream
                queue.get_nowait()
            queue.put_nowait(event)

    async def _run(self) -> None:
        while True:
            try:
                listed: set[tuple[str, str]] = set()
                query: dict[str, Any] = {"limit": LIST_CHUNK}
                while True:
                    page = await self._kube.get(self._path, **query)
                    for item in page.get("items", []):
                        listed.add((item["metadata"].get("namespace", ""), item["metadata"]["name"]))
                        self._publish(WatchEvent("ADDED", item))
                    if not page["metadata"].get("continue"):
                        break
                    query["continue"] = page["metadata"]["continue"]
                # Objects deleted while the watch was down are gone from the new list.
                for key in [k for k in self.objects if k not in listed]:
                    self._publish(WatchEvent("DELETED", self.objects[key]))
                self.last_error = None
                self.synced.set()
                await self._watch_from(page["metadata"]["resourceVersion"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
                self.synced.clear()
                log.warning("watch of %s failed, retrying: %s", self.plural, self.last_error)
                await asyncio.sleep(RETRY_DELAY)

    async def _watch_from(self, version: str) -> None:
        while True:
            async for event in self._kube.watch(self._path, resource_version=version):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return  # resource version too old: list again
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event.get("type") != "BOOKMARK":
                    self._publish(WatchEvent(event["type"], obj))
