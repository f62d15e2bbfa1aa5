"""One shared watch per resource kind, fanned out to any number of subscribers.

Every SSE client and every request that waits for a resource reads from this cache; the API
never opens a watch per client, so a hundred open streams cost the apiserver one watch.
The kubernetes client is blocking, so the watch runs in a thread and hands events to the event
loop; subscribers get an `asyncio.Queue` each.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

__all__ = ["WatchEvent", "SharedWatch"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    object: dict[str, Any]


class SharedWatch:
    """List-then-watch of one custom resource (all namespaces), restarted on expiry or error."""

    def __init__(self, api_client: k8s.ApiClient, group: str, version: str, plural: str) -> None:
        self._api = k8s.CustomObjectsApi(api_client)
        self.group, self.version, self.plural = group, version, plural
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._subscribers: set[asyncio.Queue[WatchEvent]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.synced = asyncio.Event()
        self.last_error: str | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.plural}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Signals the thread; it is a daemon blocked in a read of at most 5 s, so shutdown
        does not wait for it."""
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 0.2)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[WatchEvent]]:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue(maxsize=1000)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    def _publish(self, event: WatchEvent) -> None:
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

    def _mark_synced(self, synced: bool) -> None:
        (self.synced.set if synced else self.synced.clear)()

    def _run(self) -> None:
        try:
            self._list_and_watch()
        except RuntimeError:  # the event loop closed under us: the app is gone
            self._stop.set()

    def _list_and_watch(self) -> None:
        assert self._loop is not None
        while not self._stop.is_set():
            try:
                listing = self._api.list_cluster_custom_object(self.group, self.version, self.plural)
                version = listing["metadata"]["resourceVersion"]
                for item in listing.get("items", []):
                    self._loop.call_soon_threadsafe(self._publish, WatchEvent("ADDED", item))
                self.last_error = None
                self._loop.call_soon_threadsafe(self._mark_synced, True)
                self._watch_from(version)
            except RuntimeError:
                raise
            except Exception as exc:  # CRD missing, apiserver restarting, token expired...
                self.last_error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                self._loop.call_soon_threadsafe(self._mark_synced, False)
                log.warning("watch of %s failed, retrying: %s", self.plural, self.last_error)
                self._stop.wait(2)

    def _watch_from(self, version: str) -> None:
        assert self._loop is not None
        while not self._stop.is_set():
            watcher = k8s_watch.Watch()
            for event in watcher.stream(
                self._api.list_cluster_custom_object, self.group, self.version, self.plural,
                resource_version=version, timeout_seconds=5, allow_watch_bookmarks=True,
            ):
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event["type"] == "ERROR":
                    return  # resource version too old: list again
                if event["type"] != "BOOKMARK":
                    self._loop.call_soon_threadsafe(self._publish, WatchEvent(event["type"], obj))
                if self._stop.is_set():
                    watcher.stop()
                    return
