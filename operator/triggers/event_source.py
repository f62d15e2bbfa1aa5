"""Kubernetes Warning Events as a source of alerts, for clusters without Alertmanager.

The operator watches core Events (in the namespaces it serves); each recent Warning Event
becomes an alert — labels `alertname` and `reason` (the Event's reason), `kind`, `name` and
`namespace` of the involved object, `component` and `message` — and goes through the same
dispatcher as Alertmanager's alerts (`lestrade.triggers`) against the AlertRoutes whose
`spec.sources` include KubernetesEvents, in the Event's namespace. Its fingerprint is the involved object, so one
object gets one Investigation per route and dedup window however many Events it produces;
the routes' limits apply as for alerts.

Events arrive in bursts (a crash loop posts one per restart, an outage thousands): they are
collected for `batch_seconds` and dispatched together, one listing and one status update per
route and batch. Events older than `max_age` when first seen (what a fresh watch lists after a
restart) start nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

import kopf

from lestrade.kube import Kube, resource_path
from lestrade.resources.constants import ALERTROUTE_PLURAL
from lestrade.timefmt import parse_time
from lestrade.triggers import Alert, Dispatcher

__all__ = ["EventSource", "event_alert", "register"]

logger = logging.getLogger(__name__)

SOURCE = "KubernetesEvents"
_MAX_LABEL = 4096  # an Event's message is a label here; cap what hostile writers can make us store


def _observed(event: dict[str, Any]) -> datetime | None:
    series = event.get("series") or {}
    for value in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        try:
            moment = parse_time(str(value)) if value else None
        except ValueError:  # Events are written by anyone who can create them
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return moment
    return None


def event_alert(event: dict[str, Any]) -> Alert:
    """The alert for a Warning Event (its fingerprint names the involved object)."""
    involved = event.get("involvedObject") or {}
    namespace = str(involved.get("namespace") or (event.get("metadata") or {}).get("namespace") or "")
    kind, name = str(involved.get("kind") or ""), str(involved.get("name") or "")
    reason = str(event.get("reason") or "")[:_MAX_LABEL]
    message = str(event.get("message") or "")[:_MAX_LABEL]
    component = str(((event.get("source") or {}).get("component")) or event.get("reportingComponent") or "")
    labels = {
        "alertname": reason,
        "reason": reason,
        "kind": kind[:_MAX_LABEL],
        "name": name[:_MAX_LABEL],
        "namespace": namespace,
        "component": component[:_MAX_LABEL],
        "message": message,
    }
    fingerprint = hashlib.sha256("\x00".join((namespace, kind, name)).encode()).hexdigest()[:16]
    return Alert(
        labels=labels,
        annotations={"description": message, "summary": f"{reason} on {kind} {namespace}/{name}"},
        given_fingerprint=fingerprint,
        source=SOURCE,
        subject={"kind": kind, "name": name, "namespace": namespace},
        extra={"event": {"name": (event.get("metadata") or {}).get("name"), "count": event.get("count")}},
    )


class EventSource:
    """Collects Warning Events and dispatches them in batches."""

    def __init__(self, kube: Kube, *, batch_seconds: float = 1.0, max_age: float = 300.0) -> None:
        self.kube = kube
        self.dispatcher = Dispatcher(kube)
        self.batch_seconds = batch_seconds
        self.max_age = max_age
        self._pending: list[Alert] = []
        self._task: asyncio.Task[None] | None = None

    def offer(self, event: dict[str, Any], now: datetime | None = None) -> bool:
        """Queues a Warning Event; False when it is ignored (not a Warning, or too old)."""
        if event.get("type") != "Warning":
            return False
        observed = _observed(event)
        now = now or datetime.now(UTC)
        if observed is None or (now - observed).total_seconds() > self.max_age:
            return False
        self._pending.append(event_alert(event))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush_later())
        return True

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.batch_seconds)  # collect the burst
        batch, self._pending = self._pending, []
        namespaces = sorted({a.labels["namespace"] for a in batch})
        try:
            routes = []  # type: ignore[var-annotated]
            # An Event reaches only the routes of its own namespace: a team's route never
            # starts Investigations about another team's objects.
            for namespace in namespaces:
                listing = await self.kube.get(resource_path(ALERTROUTE_PLURAL, namespace))
                routes += listing.get("items") or []
            wanted = [r for r in routes if SOURCE in ((r.get("spec") or {}).get("sources") or [])]
            if wanted:
                await self.dispatcher.dispatch(wanted, batch)
        except Exception:
            logger.exception("could not dispatch %d Warning Events", len(batch))
        if self._pending:
            self._task = asyncio.create_task(self._flush_later())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def register(registry: kopf.OperatorRegistry) -> None:
    """The Event watch; the source lives on the memo (`memo.lestrade.engine`)."""
    sources: dict[int, EventSource] = {}

    def source_for(memo: Any) -> EventSource:
        engine = memo.lestrade.engine
        key = id(engine)
        if key not in sources:
            sources[key] = EventSource(engine.kube, batch_seconds=engine.settings.triggers.event_batch_seconds)
        return sources[key]

    @kopf.on.event("", "v1", "events", registry=registry, when=lambda body, **_: body.get("type") == "Warning")
    async def warning_event(body: kopf.Body, type: str, memo: Any, **_: Any) -> None:  # noqa: A002
        if type in ("ADDED", "MODIFIED", None):
            source_for(memo).offer(dict(body))

    @kopf.on.cleanup(registry=registry)
    async def stop_event_source(memo: Any, **_: Any) -> None:
        for source in sources.values():
            await source.close()
