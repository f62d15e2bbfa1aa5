"""ScheduledInvestigations: a Kopf daemon per schedule creates its Investigations on time.

Each round (at the next scheduled time, and at least every `schedule_recheck` seconds to
follow the runs and spec changes) does what the CronJob controller does:
- the most recent scheduled time after status.lastScheduleTime (or the creation) that has
  come is the one to start — missed times before it are not made up (after an operator
  restart only the latest is started), and it is skipped once `startingDeadlineSeconds` have
  passed since it;
- concurrencyPolicy Forbid skips it while a run is unfinished; Replace deletes the
  unfinished runs first;
- the Investigation is named `<schedule>-<unix time of the scheduled time>` and owned by the
  schedule (deleted with it), so a second round, a restart or a peer cannot create it twice
  (the apiserver's 409);
- finished Investigations beyond the history limits are deleted, oldest first.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import kopf
from croniter import croniter
from pydantic import ValidationError

from lestrade.kube import ApiException, Kube, resource_path
from lestrade.operator.base.recorder import EventRecorder
from lestrade.resources import (
    API_VERSION,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
    condition,
    set_condition,
)
from lestrade.resources.common import FINISHED_PHASES
from lestrade.resources.constants import GROUP, SCHEDULED_KIND, SCHEDULED_PLURAL, VERSION
from lestrade.resources.keys import SCHEDULED_AT_ANNOTATION, SCHEDULED_BY_LABEL
from lestrade.resources.scheduled import ScheduledInvestigation
from lestrade.timefmt import parse_time, to_iso

__all__ = ["SCHEDULED_BY_LABEL", "SCHEDULED_AT_ANNOTATION", "reconcile", "register", "ScheduleError"]

logger = logging.getLogger(__name__)


class ScheduleError(ValueError):
    """The schedule or its time zone cannot be used; the message names the field."""


def _cron(spec: Any, start: datetime) -> croniter:
    try:
        zone = ZoneInfo(spec.time_zone) if spec.time_zone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"spec.timeZone: unknown time zone {spec.time_zone!r}") from None
    if not croniter.is_valid(spec.schedule):
        raise ScheduleError(f"spec.schedule: not a valid cron schedule: {spec.schedule!r}")
    return croniter(spec.schedule, start.astimezone(zone))


async def reconcile(kube: Kube, body: dict[str, Any], recorder: EventRecorder, now: datetime) -> float | None:
    """One round for the schedule in `body`; seconds until its next scheduled time (None: no
    next time, e.g. an invalid schedule: wait for a change)."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status_path = resource_path(SCHEDULED_PLURAL, namespace, name) + "/status"
    old_status = dict(body.get("status") or {})
    status: dict[str, Any] = {}
    conditions_before = ScheduledInvestigation.model_validate(
        {"spec": {"schedule": "@daily", "investigation": {"title": "x"}}, "status": old_status}
    ).status.conditions
    generation = meta.get("generation")
    try:
        sinv = ScheduledInvestigation.model_validate(body)
        spec = sinv.spec
        created = parse_time(meta.get("creationTimestamp")) or now
        last = parse_time(old_status.get("lastScheduleTime")) or created
        latest = _cron(spec, now).get_prev(datetime)
        upcoming = _cron(spec, now).get_next(datetime)
    except (ValidationError, ScheduleError) as exc:
        message = str(exc) if isinstance(exc, ScheduleError) else f"spec: {exc.errors()[0]['msg']}"
        ready = condition("Ready", False, "InvalidSchedule", message, observed_generation=generation)
        await _write_status(
            kube,
            status_path,
            {
                "conditions": [c.to_wire() for c in set_condition(conditions_before, ready)],
                "observedGeneration": generation,
            },
            old_status,
        )
        return None

    children = await _children(kube, namespace, name)
    active = sorted(n for n, c in children.items() if _phase(c) not in FINISHED_PHASES)
    due = latest > last and latest <= now
    if due and not spec.suspend:
        late = (now - latest).total_seconds()
        when = to_iso(latest)
        if spec.starting_deadline_seconds is not None and late > spec.starting_deadline_seconds:
            recorder.post(
                "MissedSchedule",
                f"Skipped the run due at {when}: started {late:.0f}s late, "
                f"past startingDeadlineSeconds ({spec.starting_deadline_seconds})",
                "Warning",
            )
        elif active and spec.concurrency_policy == "Forbid":
            recorder.post(
                "Skipped",
                f"Skipped the run due at {when}: {', '.join(active)} still running (concurrencyPolicy Forbid)",
            )
        else:
            if active and spec.concurrency_policy == "Replace":
                for old in active:
                    await _delete(kube, namespace, old)
                    recorder.post("Replaced", f"Deleted unfinished {old} for the run due at {when}")
                active = []
            child = f"{name}-{int(latest.timestamp())}"
            if await _create(kube, sinv, child, latest):
                recorder.post("Scheduled", f"Created Investigation {child} for {when}")
            active = sorted(set(active) | {child})
            status["lastInvestigation"] = child
        status["lastScheduleTime"] = when
    await _trim(kube, namespace, children, spec.successful_history_limit, spec.failed_history_limit)
    succeeded = [
        parse_time((c.get("status") or {}).get("completionTime")) for c in children.values() if _phase(c) == "Succeeded"
    ]
    finished = [t for t in succeeded if t is not None]
    if finished:
        status["lastSuccessfulTime"] = to_iso(max(finished))
    status["active"] = active
    status["nextScheduleTime"] = to_iso(upcoming)
    ready = condition(
        "Ready",
        True,
        "Suspended" if spec.suspend else "Scheduled",
        "suspended: no new runs" if spec.suspend else f"next run at {to_iso(upcoming)}",
        observed_generation=generation,
    )
    before = next((c for c in conditions_before if c.type == "Ready"), None)
    if before is None or before.status != "True" or before.reason != ready.reason:
        status["conditions"] = [c.to_wire() for c in set_condition(conditions_before, ready)]
    status["observedGeneration"] = generation
    await _write_status(kube, status_path, status, old_status)
    return max(0.0, (upcoming - now).total_seconds())


async def _write_status(kube: Kube, path: str, status: dict[str, Any], old: dict[str, Any]) -> None:
    if all(old.get(k) == v for k, v in status.items()):
        return  # nothing new: no write, no event for the watchers
    try:
        await kube.patch(path, {"status": status}, parse=False)
    except ApiException as exc:
        if exc.status != 404:
            raise


async def _children(kube: Kube, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    listing = await kube.get(
        resource_path(INVESTIGATION_PLURAL, namespace), labelSelector=f"{SCHEDULED_BY_LABEL}={name}"
    )
    return {item["metadata"]["name"]: item for item in listing.get("items") or []}


async def _create(kube: Kube, sinv: ScheduledInvestigation, name: str, at: datetime) -> bool:
    meta = sinv.metadata
    body = {
        "apiVersion": API_VERSION,
        "kind": INVESTIGATION_KIND,
        "metadata": {
            "name": name,
            "labels": {SCHEDULED_BY_LABEL: meta["name"], "app.kubernetes.io/created-by": "lestrade-schedule"},
            "annotations": {SCHEDULED_AT_ANNOTATION: to_iso(at)},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": SCHEDULED_KIND,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": sinv.spec.investigation.to_wire(),
    }
    try:
        await kube.create(resource_path(INVESTIGATION_PLURAL, meta["namespace"]), body, parse=False)
        return True
    except ApiException as exc:
        if exc.status == 409:
            return False  # created before (a restart, a peer): nothing to do
        raise


async def _delete(kube: Kube, namespace: str, name: str) -> None:
    try:
        await kube.delete(resource_path(INVESTIGATION_PLURAL, namespace, name))
    except ApiException as exc:
        if exc.status != 404:
            raise


async def _trim(
    kube: Kube, namespace: str, children: dict[str, dict[str, Any]], keep_ok: int, keep_failed: int
) -> None:
    for phase, keep in (("Succeeded", keep_ok), ("Failed", keep_failed)):
        done = sorted(
            (c for c in children.values() if _phase(c) == phase),
            key=lambda c: (c["metadata"].get("creationTimestamp") or "", c["metadata"]["name"]),
        )
        for child in done[: max(0, len(done) - keep)]:
            await _delete(kube, namespace, child["metadata"]["name"])


def _phase(item: dict[str, Any]) -> str | None:
    return (item.get("status") or {}).get("phase")


def register(registry: kopf.OperatorRegistry) -> None:
    """The daemon of every ScheduledInvestigation (the context comes in as `memo.lestrade`)."""

    @kopf.daemon(GROUP, VERSION, SCHEDULED_PLURAL, registry=registry, id="schedule", cancellation_timeout=5, backoff=5)
    async def schedule(body: kopf.Body, stopped: kopf.DaemonStopped, memo: Any, **_: Any) -> None:
        engine = memo.lestrade.engine
        meta = body["metadata"]
        recorder = EventRecorder(
            engine.kube,
            {
                "apiVersion": API_VERSION,
                "kind": SCHEDULED_KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            engine.component,
            engine.settings.pod_name,
        )
        recheck = engine.settings.triggers.schedule_recheck
        while not stopped:
            delay = await reconcile(engine.kube, dict(body), recorder, datetime.now(UTC))
            # Wake at the next time (a hair after it), and meanwhile every `recheck` seconds to
            # follow the runs (history, active) and edits of the spec.
            await stopped.wait(recheck if delay is None else min(delay + 0.01, recheck))
