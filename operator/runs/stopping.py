"""A daemon that stops its work as soon as Kopf asks, so `kubectl delete` never waits on it.

When an object is deleted (or the operator exits, or a peer takes over), Kopf first sets the
daemon's `stopped` flag and gives it a moment to exit. A daemon that only reacts to being
cancelled is cancelled next, and if it has not finished within a few event-loop cycles Kopf
re-checks it only after `cancellation_timeout` (or when the object changes again) — so any
cleanup that needs a round trip to the apiserver (deleting the Jobs of a deleted Investigation)
held the deletion for the whole timeout. Here the daemon watches the flag itself: it cancels its
work, waits until the work has unwound (cleanup included) and returns; Kopf waits up to
`STOP_GRACE` seconds for that (`configure`) and removes its finalizer at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import kopf

__all__ = ["STOP_GRACE", "configure", "run_until_stopped"]

STOP_GRACE = 5.0
"""Seconds Kopf waits for a stopping daemon before it cancels it (then `cancellation_timeout`)."""


def configure(settings: kopf.OperatorSettings) -> None:
    settings.background.instant_exit_timeout = STOP_GRACE


async def run_until_stopped(
    work: Coroutine[Any, Any, None],
    stopped: kopf.DaemonStopped,
    gone: asyncio.Event | None = None,
) -> None:
    """Runs `work` until it returns, the daemon is asked to stop, or `gone` is set (the watch
    saw the object deleted: without a finalizer Kopf does not stop the daemon itself); then
    cancels it and waits until it has unwound. The work's own exceptions propagate; its
    cancellation on a stop does not."""
    task = asyncio.ensure_future(work)
    stops = {asyncio.ensure_future(stopped.wait())}
    if gone is not None:
        stops.add(asyncio.ensure_future(gone.wait()))  # type: ignore[arg-type]
    try:
        await asyncio.wait({task, *stops}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when Kopf cancels this daemon by force
        for stop in stops:
            stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if not task.cancelled():
        task.result()
