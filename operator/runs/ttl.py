"""`spec.ttlSecondsAfterFinished`: delete finished Investigations after a while.

One timer per finished Investigation that asked for it, set from a watch of its own that asks
the apiserver for exactly those (field selectors on the CRD's selectable fields: finished phase
and a TTL set, `FINISHED_WITH_TTL_SELECTORS`), so a restarted operator re-arms every timer when
it lists them again and an Investigation that finishes arrives as ADDED. Kopf's watch does not
see finished Investigations at all (`selection.py`), and Investigations without a TTL are never
sent to the operator. No finalizer and no daemon per finished object: a finished Investigation
with a TTL costs one timer handle until it goes. The delete carries a uid precondition, so a
new Investigation that reuses the name is never deleted by its predecessor's timer. Every
replica runs it (a standby too): a second delete of the same object is a 404, ignored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lestrade.kube import Kube, investigation_path, is_not_found, resource_path
from lestrade.resources.common import Phase
from lestrade.resources.constants import INVESTIGATION_PLURAL
from lestrade.resources.investigation import FINISHED_WITH_TTL_SELECTORS
from lestrade.timefmt import parse_time

__all__ = ["TtlReaper"]

logger = logging.getLogger(__name__)

_FINISHED = (Phase.SUCCEEDED, Phase.FAILED)
LIST_CHUNK = 500  # objects per page when listing (bounded memory at start)
RETRY_DELAY = 2.0  # seconds before listing again after a failed list or watch


def _expiry(body: Mapping[str, Any]) -> float | None:
    ttl = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
    status = body.get("status") or {}
    if ttl is None or status.get("phase") not in _FINISHED or not status.get("completionTime"):
        return None
    finished = parse_time(status["completionTime"])
    assert finished is not None
    return finished.timestamp() + float(ttl)


class TtlReaper:
    """Deletes finished Investigations once their TTL has passed."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def consider(self, body: Mapping[str, Any]) -> None:
        """Arms (or re-arms) the timer of this object if it has finished and has a TTL."""
        meta = body.get("metadata") or {}
        uid = meta.get("uid")
        expiry = _expiry(body)
        if not uid or expiry is None or meta.get("deletionTimestamp"):
            return
        armed = self._timers.get(uid)
        if armed is not None and armed[0] == expiry:
            return
        self.forget(uid)
        loop = asyncio.get_running_loop()
        handle = loop.call_later(max(0.0, expiry - time.time()), self._fire, meta["namespace"], meta["name"], uid)
        self._timers[uid] = (expiry, handle)

    async def follow(self, namespaces: Sequence[str] = (), *, selective: bool = True) -> None:
        """Keeps the timers of every finished Investigation with a TTL (in `namespaces`, or all
        namespaces) until cancelled: one list-then-watch per selector and namespace. Without
        `selective` (an older CRD that cannot select by phase) it watches every Investigation
        and keeps only the timers (`consider` skips the rest)."""
        selectors = FINISHED_WITH_TTL_SELECTORS if selective else ("",)
        paths = [investigation_path(ns) for ns in namespaces] or [resource_path(INVESTIGATION_PLURAL, None)]
        tasks = [
            asyncio.create_task(self._follow(path, selector), name=f"ttl watch {path}")
            for path in paths
            for selector in selectors
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, path: str, selector: str) -> None:
        while True:
            try:
                version = await self._list(path, selector)
                await self._watch(path, selector, version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("TTL watch of %s (%s) failed, listing again: %s", path, selector, exc)
                await asyncio.sleep(RETRY_DELAY)

    async def _list(self, path: str, selector: str) -> str:
        """Arms the timers of what is there now (page by page); the list's resourceVersion."""
        query: dict[str, Any] = {"limit": LIST_CHUNK, **({"fieldSelector": selector} if selector else {})}
        while True:
            page = await self._kube.get(path, **query)
            for item in page.get("items") or []:
                self.consider(item)
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return str(meta.get("resourceVersion", ""))
            query["continue"] = meta["continue"]

    async def _watch(self, path: str, selector: str, version: str) -> None:
        while True:  # each watch ends after the server's timeout; resume from the last version
            selection = {"fieldSelector": selector} if selector else {}
            async for event in self._kube.watch(path, resource_version=version, **selection):  # type: ignore[arg-type]
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return  # e.g. 410 Gone: the version is too old, list again
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if kind in ("ADDED", "MODIFIED"):
                    self.consider(obj)
                elif kind == "DELETED":
                    self.forget((obj.get("metadata") or {}).get("uid", ""))

    def forget(self, uid: str) -> None:
        armed = self._timers.pop(uid, None)
        if armed is not None:
            armed[1].cancel()

    def close(self) -> None:
        for uid in list(self._timers):
            self.forget(uid)

    def _fire(self, namespace: str, name: str, uid: str) -> None:
        self._timers.pop(uid, None)
        task = asyncio.create_task(self._delete(namespace, name, uid), name=f"ttl {name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _delete(self, namespace: str, name: str, uid: str) -> None:
        try:
            await self._kube.request(
                "DELETE",
                investigation_path(namespace, name),
                {"preconditions": {"uid": uid}, "propagationPolicy": "Background"},
            )
            logger.info("deleted %s/%s: its ttlSecondsAfterFinished has passed", namespace, name)
        except Exception as exc:
            if not is_not_found(exc) and getattr(exc, "status", None) != 409:
                logger.warning("could not delete %s/%s after its TTL: %s", namespace, name, exc)
