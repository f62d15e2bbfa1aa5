"""A batch of alerts against the routes: deduplicate, limit, create, count, resolve.

Exactly-once without coordination between replicas:
- names are deterministic (`naming.py`), so the apiserver's 409 on create is the dedup of
  last resort (two replicas, a redelivered webhook);
- the limits are reserved before creating, by an update of the route's status carrying the
  resourceVersion it read (a conflict means another replica reserved first: read again and
  recount), so `maxPerInterval` holds across replicas; names being created are kept as
  short-lived claims there, so `maxOpen` counts them before listings can see them;
- the counters are added the same way, after the creates, so no increment is ever lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from lestrade.kube import ApiException, Kube, resource_path
from lestrade.resources import (
    API_VERSION,
    CONDITION_SUCCEEDED,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
    InvestigationSpec,
    condition,
    set_condition,
)
from lestrade.resources.alertroute import (
    AlertRoute,
    AlertRouteStatus,
    Claim,
    InvestigationRef,
    RateWindow,
)
from lestrade.resources.common import FINISHED_PHASES
from lestrade.resources.constants import ALERTROUTE_PLURAL
from lestrade.timefmt import to_iso
from lestrade.triggers.alerts import Alert
from lestrade.triggers.matching import CompiledRoute, RouteError, compile_route
from lestrade.triggers.naming import (
    ALERT_FINGERPRINT_LABEL,
    ALERT_RESOLVED_ANNOTATION,
    ALERT_ROUTE_LABEL,
    ALERT_STARTS_AT_ANNOTATION,
    CREATED_BY,
    investigation_name,
    window_index,
)
from lestrade.triggers.reach import RoutePolicy, never_matches, ready_message
from lestrade.triggers.templates import render_template

__all__ = ["Dispatcher", "DispatchResult", "RouteOutcome", "Creator", "CONDITION_READY"]

logger = logging.getLogger(__name__)

CONDITION_READY = "Ready"
CREATED_BY_LABEL = "app.kubernetes.io/created-by"
# Subject fields taken from the alert's labels when present: what the agent looks at first.
_SUBJECT_LABELS = (
    "namespace",
    "pod",
    "container",
    "deployment",
    "statefulset",
    "daemonset",
    "job_name",
    "node",
    "service",
    "persistentvolumeclaim",
)


class Creator(Protocol):
    """What creates the Investigations (the API writes as its caller: `Kube.acting_as`)."""

    async def create(self, path: str, body: dict[str, Any], *, parse: bool = True) -> Any: ...


@dataclass
class RouteOutcome:
    """What one route did with one batch."""

    namespace: str
    route: str
    matched: int = 0
    created: list[str] = field(default_factory=list)
    deduplicated: int = 0
    dropped: int = 0
    resolved: int = 0
    cancelled: list[str] = field(default_factory=list)
    error: str | None = None
    reason: str | None = None
    """The Ready condition's reason when the route is not usable (else derived from `error`)."""
    unreachable: bool = False
    """The route can see no alert (`reach.never_matches`): not part of the webhook's answer."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "route": self.route,
            "matched": self.matched,
            "created": self.created,
            "deduplicated": self.deduplicated,
            "dropped": self.dropped,
            "resolved": self.resolved,
            "cancelled": self.cancelled,
            "error": self.error,
        }


@dataclass
class DispatchResult:
    routes: list[RouteOutcome]

    def as_dict(self) -> dict[str, Any]:
        touched = [r for r in self.routes if (r.matched or r.resolved or r.error) and not r.unreachable]
        return {
            "matched": sum(r.matched for r in self.routes),
            "created": sum(len(r.created) for r in self.routes),
            "deduplicated": sum(r.deduplicated for r in self.routes),
            "dropped": sum(r.dropped for r in self.routes),
            "resolved": sum(r.resolved for r in self.routes),
            "routes": [r.as_dict() for r in touched],
        }


def _now() -> datetime:
    return datetime.now(UTC)


class Dispatcher:
    """Matches alerts against routes and acts; one per process (it holds no per-batch state)."""

    def __init__(
        self,
        kube: Kube,
        *,
        claim_seconds: float = 120.0,
        create_concurrency: int = 16,
        max_conflicts: int = 100,
        now: Callable[[], datetime] = _now,
    ) -> None:
        self.kube = kube
        self.claim_seconds = claim_seconds
        """How long a reservation counts as open for maxOpen: far longer than a create takes,
        short enough that a crashed replica's claims do not hold the limit for long."""
        self.create_concurrency = create_concurrency
        self.max_conflicts = max_conflicts
        self.now = now

    async def dispatch(
        self,
        routes: Sequence[dict[str, Any]],
        alerts: Sequence[Alert],
        creator: Creator | None = None,
        *,
        policy: RoutePolicy | None = None,
        creator_for: Callable[[str], Creator] | None = None,
    ) -> DispatchResult:
        """Every route against every alert; routes are handled concurrently. With a `policy`,
        routes that can see no alert under it match nothing and say why in their status;
        `creator_for(namespace)` picks who creates a route's Investigations (else `creator`)."""
        outcomes = await asyncio.gather(
            *(
                self._route(
                    raw,
                    alerts,
                    (creator_for or (lambda _: creator or self.kube))(
                        str((raw.get("metadata") or {}).get("namespace") or "")
                    ),
                    policy,
                )
                for raw in routes
            )
        )
        return DispatchResult(list(outcomes))

    # -- one route --------------------------------------------------------------------------------

    async def _route(
        self, raw: dict[str, Any], alerts: Sequence[Alert], creator: Creator, policy: RoutePolicy | None = None
    ) -> RouteOutcome:
        meta = raw.get("metadata") or {}
        outcome = RouteOutcome(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        try:
            route = AlertRoute.model_validate(raw)
            compiled = compile_route(route)
        except (ValidationError, RouteError) as exc:
            outcome.error = str(exc) if isinstance(exc, RouteError) else f"spec: {exc.errors()[0]['msg']}"
            await self._record(outcome, raw, refund=0, claims_done=[])
            return outcome
        blocked = never_matches(route, policy) if policy is not None else None
        if blocked is not None:
            outcome.reason, outcome.error = blocked
            outcome.unreachable = True
            if not _says(raw, *blocked):  # said once, not re-read on every webhook
                await self._record(outcome, raw, refund=0, claims_done=[])
            return outcome
        sources = set(route.spec.sources)
        mine = [a for a in alerts if a.source in sources]
        firing = [a for a in mine if a.firing and compiled.matches(a.labels)]
        resolved = [a for a in mine if not a.firing and compiled.matches(a.labels)]
        if not firing and not resolved:
            if not _ready(raw):
                await self._record(outcome, raw, refund=0, claims_done=[])
            return outcome
        outcome.matched = len(firing)
        existing = await self._investigations(route)
        refund, claimed = 0, []  # type: ignore[var-annotated]
        if firing:
            refund, claimed = await self._fire(compiled, firing, existing, outcome, creator)
        for alert in resolved:
            await self._resolve(alert, existing, outcome)
        await self._record(outcome, raw, refund=refund, claims_done=claimed)
        return outcome

    async def _investigations(self, route: AlertRoute) -> dict[str, dict[str, Any]]:
        listing = await self.kube.get(
            resource_path(INVESTIGATION_PLURAL, route.namespace),
            labelSelector=f"{ALERT_ROUTE_LABEL}={route.name}",
        )
        return {item["metadata"]["name"]: item for item in listing.get("items") or []}

    async def _fire(
        self,
        compiled: CompiledRoute,
        firing: list[Alert],
        existing: dict[str, dict[str, Any]],
        outcome: RouteOutcome,
        creator: Creator,
    ) -> tuple[int, list[str]]:
        route = compiled.route
        now = self.now()
        window = route.spec.dedup_seconds()
        open_items = {n: o for n, o in existing.items() if _phase(o) not in FINISHED_PHASES}
        open_fingerprints = {
            (o["metadata"].get("labels") or {}).get(ALERT_FINGERPRINT_LABEL) for o in open_items.values()
        }
        candidates: dict[str, Alert] = {}
        for alert in sorted(firing, key=_age_order):
            name = investigation_name(route.name, alert, window_index(alert, window, now))
            if name in existing or name in candidates or alert.fingerprint in open_fingerprints:
                outcome.deduplicated += 1
            else:
                candidates[name] = alert
        if not candidates:
            return 0, []
        if route.spec.suspend:
            outcome.dropped += len(candidates)
            return 0, []
        taken, claimed_elsewhere = await self._reserve(route, list(candidates), set(open_items))
        outcome.deduplicated += len(claimed_elsewhere)
        outcome.dropped += len(candidates) - len(taken) - len(claimed_elsewhere)
        gate = asyncio.Semaphore(self.create_concurrency)

        async def create(name: str) -> str:
            async with gate:
                return await self._create(compiled, name, candidates[name], creator, now)

        results = await asyncio.gather(*(create(n) for n in taken))
        refund = 0
        for name, result in zip(taken, results):
            if result == "created":
                outcome.created.append(name)
            elif result == "exists":
                outcome.deduplicated += 1
                refund += 1
            else:
                outcome.dropped += 1
                refund += 1
                outcome.error = result
        return refund, taken

    async def _reserve(self, route: AlertRoute, names: list[str], open_names: set[str]) -> tuple[list[str], list[str]]:
        """(names this replica may create, names another replica has claimed)."""
        limits = route.spec.limits
        if limits.max_per_interval is None and limits.max_open is None:
            return names, []
        interval = limits.interval_seconds()
        decided: tuple[list[str], list[str]] = ([], [])

        def change(status: AlertRouteStatus, now: datetime) -> bool:
            nonlocal decided
            claims = [c for c in status.claims if (now - c.time).total_seconds() < self.claim_seconds]
            claimed = {c.name for c in claims}
            elsewhere = [n for n in names if n in claimed]
            wanted = [n for n in names if n not in claimed]
            room = len(wanted)
            window = status.window
            if limits.max_per_interval is not None:
                if window is None or (now - window.start).total_seconds() >= interval:
                    window = RateWindow(start=now, created=0)
                room = min(room, max(0, limits.max_per_interval - window.created))
            if limits.max_open is not None:
                room = min(room, max(0, limits.max_open - len(open_names | claimed)))
            taken = wanted[:room]
            decided = (taken, elsewhere)
            if not taken:
                return False
            if limits.max_per_interval is not None and window is not None:
                status.window = window.model_copy(update={"created": window.created + len(taken)})
            if limits.max_open is not None:
                status.claims = claims + [Claim(name=n, time=now) for n in taken]
            return True

        await self._update_status(route.namespace, route.name, change)
        return decided

    async def _create(self, compiled: CompiledRoute, name: str, alert: Alert, creator: Creator, now: datetime) -> str:
        route = compiled.route
        try:
            body = investigation_manifest(route, name, alert)
        except (ValidationError, ValueError) as exc:
            return f"{name}: the rendered Investigation is not valid: {exc}"
        try:
            await creator.create(resource_path(INVESTIGATION_PLURAL, route.namespace), body, parse=False)
        except ApiException as exc:
            if exc.status == 409:
                return "exists"
            logger.warning("route %s/%s could not create %s: %s", route.namespace, route.name, name, exc.reason)
            return f"creating {name}: {exc.status} {exc.reason}: {_message(exc)}"
        return "created"

    async def _resolve(self, alert: Alert, existing: dict[str, dict[str, Any]], outcome: RouteOutcome) -> None:
        """Records the resolution on the alert's Investigations; cancels those not started."""
        when = to_iso(alert.ends_at or self.now())
        for name, item in existing.items():
            meta = item["metadata"]
            if (meta.get("labels") or {}).get(ALERT_FINGERPRINT_LABEL) != alert.fingerprint:
                continue
            if ALERT_RESOLVED_ANNOTATION in (meta.get("annotations") or {}):
                continue
            path = resource_path(INVESTIGATION_PLURAL, outcome.namespace, name)
            if not await self._mark_resolved(path, item, when):
                continue
            outcome.resolved += 1
            if await self._cancel_if_pending(path, when):
                outcome.cancelled.append(name)

    async def _mark_resolved(self, path: str, item: dict[str, Any], when: str) -> bool:
        """Adds the resolved annotation unless another replica did: the patch carries the
        resourceVersion read, so of two concurrent deliveries only one counts it."""
        for _ in range(self.max_conflicts):
            meta = item["metadata"]
            if ALERT_RESOLVED_ANNOTATION in (meta.get("annotations") or {}):
                return False
            patch = {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "annotations": {ALERT_RESOLVED_ANNOTATION: when},
                }
            }
            try:
                await self.kube.patch(path, patch, parse=False)
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
            try:
                item = await self.kube.get(path)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
        return False

    async def _cancel_if_pending(self, path: str, when: str) -> bool:
        """Fails a not-yet-started Investigation with reason AlertResolved (an update carrying
        the resourceVersion read: if the operator started it meanwhile, it runs on)."""
        for _ in range(self.max_conflicts):
            try:
                item = await self.kube.get(path)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            status = dict(item.get("status") or {})
            if status.get("phase") not in (None, "Pending"):
                return False
            message = f"The alert resolved at {when}, before the investigation started"
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != CONDITION_SUCCEEDED]
            conditions.append(condition(CONDITION_SUCCEEDED, False, "AlertResolved", message).to_wire())
            status.update(phase="Failed", message=message, conditions=conditions, completionTime=to_iso(self.now()))
            item["status"] = status
            try:
                await self.kube.request("PUT", f"{path}/status", item, parse=False)
                return True
            except ApiException as exc:
                if exc.status == 409:
                    continue
                if exc.status == 404:
                    return False
                raise
        return False

    # -- the route's status -----------------------------------------------------------------------

    async def _record(self, outcome: RouteOutcome, raw: dict[str, Any], *, refund: int, claims_done: list[str]) -> None:
        generation = (raw.get("metadata") or {}).get("generation")
        try:
            route: AlertRoute | None = AlertRoute.model_validate(raw)
        except ValidationError:
            route = None
        newest = outcome.created[-1] if outcome.created else None
        failed = set(claims_done) - set(outcome.created)

        def change(status: AlertRouteStatus, now: datetime) -> bool:
            counted = outcome.matched or outcome.created or outcome.deduplicated or outcome.dropped or outcome.resolved
            before = next((c for c in status.conditions if c.type == CONDITION_READY), None)
            if (
                not counted
                and before is not None
                and before.status == ("True" if outcome.error is None else "False")
                and before.message == (outcome.error or before.message)
                and status.observed_generation == generation
                and (outcome.reason is None or before.reason == outcome.reason)
            ):
                return False  # nothing new to say: no write for routes that matched nothing
            status.matched += outcome.matched
            status.created += len(outcome.created)
            status.deduplicated += outcome.deduplicated
            status.dropped += outcome.dropped
            status.resolved += outcome.resolved
            if newest is not None:
                status.last_investigation = InvestigationRef(name=newest, time=now)
            if refund and status.window is not None:
                status.window = status.window.model_copy(update={"created": max(0, status.window.created - refund)})
            if failed:
                status.claims = [c for c in status.claims if c.name not in failed]
            ok = outcome.error is None or bool(outcome.created)
            ready = condition(
                CONDITION_READY,
                outcome.error is None,
                outcome.reason
                or ("Valid" if outcome.error is None else ("InvalidRoute" if not ok else "CreateFailed")),
                outcome.error or (ready_message(route) if route else "The route creates Investigations"),
                observed_generation=generation,
            )
            status.conditions = set_condition(status.conditions, ready)
            status.observed_generation = generation
            return True

        await self._update_status(outcome.namespace, outcome.route, change)

    async def _update_status(
        self, namespace: str, name: str, change: Callable[[AlertRouteStatus, datetime], bool]
    ) -> None:
        """Read, change, write with the resourceVersion read; again on a conflict."""
        path = resource_path(ALERTROUTE_PLURAL, namespace, name)
        for attempt in range(self.max_conflicts):
            try:
                item = await self.kube.get(path)
            except ApiException as exc:
                if exc.status == 404:
                    return  # the route was deleted meanwhile: nothing to count on
                raise
            status = AlertRouteStatus.model_validate(item.get("status") or {})
            if not change(status, self.now()):
                return
            item["status"] = status.to_wire()
            try:
                await self.kube.request("PUT", f"{path}/status", item, parse=False)
                return
            except ApiException as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise
            # Another replica wrote first; spread the retries so the replicas do not collide again.
            await asyncio.sleep(random.uniform(0, 0.01 * min(attempt + 1, 20)))
        raise RuntimeError(f"AlertRoute {namespace}/{name}: status kept conflicting with other writers")


def investigation_manifest(route: AlertRoute, name: str, alert: Alert) -> dict[str, Any]:
    """The Investigation for `alert`, rendered from the route's template."""
    template = route.spec.investigation
    values: dict[str, Any] = {
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "status": alert.status,
        "fingerprint": alert.fingerprint,
        "startsAt": to_iso(alert.starts_at) if alert.starts_at else "",
        "route": route.name,
    }
    title = render_template(template.title, values, 1024).strip() or alert.labels.get("alertname") or "Alert"
    if template.description is not None:
        description: str | None = render_template(template.description, values, 65536)
    else:
        description = alert.annotations.get("description") or alert.annotations.get("summary")
    question = render_template(template.question, values, 32768) if template.question else None
    subject: dict[str, Any] = {"kind": "Alert", "name": alert.labels.get("alertname", "")}
    subject.update({k: alert.labels[k] for k in _SUBJECT_LABELS if alert.labels.get(k)})
    if alert.subject is not None:
        subject = dict(alert.subject)
    spec = InvestigationSpec(
        title=title,
        description=description[:65536] if description else None,
        source=template.source,
        subject=subject,
        context={"alert": alert.as_context(), "route": route.name, **alert.extra},
        question=question,
        model=template.model,
        sections=template.sections,
        max_steps=template.max_steps,
        timeout=template.timeout,
        max_tokens=template.max_tokens,
        max_cost=template.max_cost,
        ttl_seconds_after_finished=template.ttl_seconds_after_finished,
        deliver=template.deliver,
        **({} if template.enable_tool_approval is None else {"enable_tool_approval": template.enable_tool_approval}),  # type: ignore[arg-type]
    )
    annotations = {}
    if alert.starts_at is not None:
        annotations[ALERT_STARTS_AT_ANNOTATION] = to_iso(alert.starts_at)
    return {
        "apiVersion": API_VERSION,
        "kind": INVESTIGATION_KIND,
        "metadata": {
            "name": name,
            "namespace": route.namespace,
            "labels": {
                ALERT_ROUTE_LABEL: route.name,
                ALERT_FINGERPRINT_LABEL: alert.fingerprint,
                CREATED_BY_LABEL: CREATED_BY,
            },
            "annotations": annotations,
        },
        "spec": spec.to_wire(),
    }


def _phase(item: dict[str, Any]) -> str | None:
    return (item.get("status") or {}).get("phase")


def _says(raw: dict[str, Any], reason: str, message: str) -> bool:
    """Whether the route's Ready condition already says this, for its current generation."""
    status = raw.get("status") or {}
    if status.get("observedGeneration") != (raw.get("metadata") or {}).get("generation"):
        return False
    return any(
        c.get("type") == CONDITION_READY and c.get("reason") == reason and c.get("message") == message
        for c in status.get("conditions") or []
    )


def _ready(raw: dict[str, Any]) -> bool:
    for cond in (raw.get("status") or {}).get("conditions") or []:
        if cond.get("type") == CONDITION_READY:
            return cond.get("status") == "True"
    return False


def _age_order(alert: Alert) -> tuple[datetime, str]:
    return (alert.starts_at or datetime.min.replace(tzinfo=UTC), alert.fingerprint)


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or "")
    except json.JSONDecodeError:
        return ""
