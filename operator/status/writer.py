"""Coalesced status writes for one resource.

An agent run produces many small facts per second (a token count, a tool call starting, a
result). Patching status for each of them would flood the apiserver and every watcher (each
patch is a watch event for Kopf, kubectl and the API), so the writer keeps the status it
believes is stored, marks the fields that changed, and sends one merge patch per `interval`
carrying only those fields; the first interval starts with the first change. Milestones
(approvals, a Conversation turn's start, the end) are sent at once, together with whatever
progress was still waiting; an Investigation's start is progress, so a run that ends within
the interval writes its status once. Under load the operator stretches the interval so that
all runs together stay within a budget of progress patches per second.

Only the operator (or the Job running the investigation) writes status, and only one writer is
active per resource, so a merge patch of the changed top-level fields is enough; lists such as
`conditions` are always sent whole.

Writes are fenced like the transcript's (`lestrade/runs/transcript.py`): a writer given a
`token` (its run attempt) stores it in `status.writer` with its first patch, and every patch
carries the object's resourceVersion as this writer last saw it. A conflict (someone else wrote
the object since: a person's decision, Kopf, a delivery record, or another attempt) is read
again: while `status.writer` is still ours the patch is retried on the fresh version; once
another attempt's token is there, `StatusFenced` — so a write in flight from a replica that lost
the run cannot land after another replica took it over.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

from lestrade.kube import Kube, is_conflict
from lestrade.resources.common import (
    Condition,
    ConditionStatus,
    WireModel,
    condition,
    set_condition,
)
from lestrade.runs.transcript import TranscriptFenced

__all__ = ["StatusWriter", "StatusFenced"]

WRITER_KEY = "writer"

_CONFLICT_RETRIES = 5
"""Conflicts in a row while still the writer (other writes keep landing in between) before the
last one is raised: the next milestone tries again."""


class StatusFenced(TranscriptFenced):
    """Another run attempt wrote status since this writer's last write: this one must stop
    (a `TranscriptFenced`, so the attempt stops the same way)."""


logger = logging.getLogger(__name__)


def _wire(value: Any) -> Any:
    if isinstance(value, WireModel):
        return value.to_wire()
    if isinstance(value, list):
        return [_wire(item) for item in value]
    return value


class StatusWriter:
    """Holds the resource's status in memory and patches the changed fields, coalesced."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        initial: Mapping[str, Any] | None = None,
        *,
        interval: float | Callable[[], float] = 0.3,
        generation: int | None = None,
        token: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        """`path` is the resource's URL path (without `/status`); `interval` may be a function,
        asked each time, so the caller can stretch it under load. With a `token` (the run
        attempt) the writes are fenced, starting from `resource_version` (the object as the
        attempt read it; none: the first write is unconditional)."""
        self._kube = kube
        self._path = f"{path}/status"
        self.current: dict[str, Any] = copy.deepcopy(dict(initial or {}))
        self._dirty: set[str] = set()
        self._lazy: dict[str, Callable[[], Mapping[str, Any]]] = {}
        """Fields computed when the next patch is built (`set_lazy`)."""
        self._shadowed: set[str] = set()
        """Fields `set` after the lazy ones were given: those values win (a milestone's)."""
        self._interval = interval if callable(interval) else (lambda: interval)
        self._generation = generation
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_flush = float("-inf")
        self._error: BaseException | None = None
        self.patches = 0
        self._urgent = False
        self.last_object: dict[str, Any] | None = None
        """The whole object as the apiserver returned it after the last patch."""
        self._token = token
        self._version = resource_version if token else None
        self._claimed = False
        """This writer's token is stored: from now on a foreign one there means fenced."""
        if token is not None:
            self.current[WRITER_KEY] = token
            self._dirty.add(WRITER_KEY)

    # -- changing ------------------------------------------------------------------------------

    def set(self, **fields: Any) -> None:
        """Changes top-level status fields (camelCase names); sent within `interval`. Values
        may be the resource models (`Usage`, `ToolCall`, ...), which are sent in wire form."""
        if self._lazy:
            self._shadowed.update(fields)
        for key, value in fields.items():
            value = _wire(value)
            if self.current.get(key) != value or key not in self.current:
                self.current[key] = value
                self._dirty.add(key)
        self._schedule()

    def set_lazy(self, name: str, fields: Callable[[], Mapping[str, Any]]) -> None:
        """Fields that change with every event of a run (its counts, its calls) computed only
        when the next patch is built, by the latest `fields` given under `name`: once per patch,
        not once per event. A field `set` after this wins over what `fields` gives for it."""
        self._lazy[name] = fields
        self._schedule()

    def _compute_lazy(self) -> None:
        lazy, self._lazy = self._lazy, {}
        shadowed, self._shadowed = self._shadowed, set()
        for fields in lazy.values():
            for key, value in fields().items():
                if key in shadowed:
                    continue
                value = _wire(value)
                if self.current.get(key) != value or key not in self.current:
                    self.current[key] = value
                    self._dirty.add(key)

    def set_condition(
        self,
        type: str,
        status: ConditionStatus | bool,
        reason: str,
        message: str = "",  # noqa: A002
    ) -> None:
        """Sets one condition (Kubernetes conventions: the transition time only moves on change)."""
        existing = [Condition.model_validate(c) for c in self.current.get("conditions", [])]
        new = condition(type, status, reason, message[:32000], observed_generation=self._generation)
        updated = [c.to_wire() for c in set_condition(existing, new)]
        self.set(conditions=updated)

    def condition_status(self, type: str) -> str | None:  # noqa: A002
        for item in self.current.get("conditions", []):
            if item.get("type") == type:
                return str(item.get("status"))
        return None

    async def milestone(self, **fields: Any) -> None:
        """Changes fields and sends everything waiting now."""
        self.set(**fields)
        await self.flush()

    def send_soon(self, **fields: Any) -> None:
        """A milestone the caller need not wait for: sent at once, in the background, still in
        order with every other write of this writer (`flush()` waits for it)."""
        self.set(**fields)
        self._urgent = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._schedule()

    async def settled(self) -> None:
        """Returns once the milestones sent so far (`send_soon`) are stored; progress changed
        since then still waits for its interval (`flush()` would send it now: one more patch
        of the whole object for the apiserver and every watcher)."""
        if self._urgent:
            await self.flush()  # the milestone's write has not started: it starts now
            return
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            await asyncio.wait([task])  # not cancelled with us: it is the writer's own write
        if self._error is not None:
            await self.flush()  # raises the background write's error (the milestone is unsent)

    # -- sending -------------------------------------------------------------------------------

    def _schedule(self) -> None:
        if not (self._dirty or self._lazy) or self._timer is not None:
            return
        running = self._task is not None and not self._task.done()
        if running and self._task is not asyncio.current_task():
            return  # the running flush re-schedules when it is done
        loop = asyncio.get_running_loop()
        if self._last_flush == float("-inf"):
            # The first interval starts with the first change: a run's first facts (its scope)
            # wait for the next ones (its start) instead of costing a write of their own.
            self._last_flush = loop.time()
        delay = 0.0 if self._urgent else max(0.0, self._last_flush + self._interval() - loop.time())
        self._timer = loop.call_later(delay, self._start_background_flush)

    def _start_background_flush(self) -> None:
        self._timer = None
        self._task = asyncio.create_task(self._background_flush(), name="status flush")

    async def _background_flush(self) -> None:
        try:
            await self.flush()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # surfaced by the next milestone
            logger.warning("status patch of %s failed: %s", self._path, exc)
            self._error = exc

    async def flush(self) -> None:
        """Sends the changed fields now (waits for a flush already under way)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self._lock:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            self._compute_lazy()
            if self._dirty:
                keys, self._dirty = self._dirty, set()
                self._urgent = False
                patch = {key: self.current.get(key) for key in keys}
                if self._generation is not None:
                    patch["observedGeneration"] = self._generation
                self._last_flush = asyncio.get_running_loop().time()
                try:
                    self.last_object = await self._send(patch)
                    self.patches += 1
                except BaseException:
                    self._dirty |= keys
                    raise
        self._schedule()

    async def _send(self, patch: dict[str, Any]) -> Any:
        if self._token is None:
            return await self._kube.patch(self._path, {"status": patch})
        if not self._claimed:
            patch = {**patch, WRITER_KEY: self._token}  # every write until one landed claims
        for tries in range(_CONFLICT_RETRIES, -1, -1):
            body: dict[str, Any] = {"status": patch}
            if self._version is not None:
                body["metadata"] = {"resourceVersion": self._version}
            try:
                stored = await self._kube.patch(self._path, body)
            except Exception as exc:
                if not is_conflict(exc) or tries == 0:
                    raise
                current = await self._kube.get(self._path)
                holder = (current.get("status") or {}).get(WRITER_KEY)
                if self._claimed and holder is not None and holder != self._token:
                    raise StatusFenced(
                        f"status of {self._path.removesuffix('/status')} is written by {holder} now, "
                        f"not by {self._token}: another replica or attempt owns this run"
                    ) from exc
                self._version = (current.get("metadata") or {}).get("resourceVersion")
                continue
            self._claimed = True
            self._version = (stored.get("metadata") or {}).get("resourceVersion") if isinstance(stored, dict) else None
            return stored
        raise AssertionError("unreachable")  # the last try returns or raises

    def discard(self) -> None:
        """Forgets the changes not sent yet (a writer that lost its run must not send them)."""
        self._dirty.clear()
        self._lazy.clear()
        self._shadowed.clear()
        self._urgent = False

    async def close(self) -> None:
        """Stops background sending (what is unsent stays unsent)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
