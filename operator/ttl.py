"""`spec.ttlSecondsAfterFinished`: delete finished Investigations after a while.

One timer per finished Investigation that asked for it, set from the watch (so a restarted
operator re-arms every timer when it lists the objects again) and cancelled when the object
goes away. No finalizer and no daemon per finished object: a finished Investigation costs the
operator one timer handle. The delete carries a uid precondition, so a new Investigation that
reuses the name is never deleted by its predecessor's timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from lestrade.kube import Kube, investigation_path, is_not_found
from lestrade.resources.common import Phase
from lestrade.timefmt import parse_time

__all__ = ["TtlReaper"]

logger = logging.getLogger(__name__)

_FINISHED = (Phase.SUCCEEDED, Phase.FAILED)


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
        handle = loop.call_later(
            max(0.0, expiry - time.time()), self._fire, meta["namespace"], meta["name"], uid
        )
        self._timers[uid] = (expiry, handle)

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
