"""An AlertRoute says at once whether it can ever match, before any alert arrives.

When a route is created or its spec changes, the operator writes its Ready condition: False
with the reason when the route can see no alert (`lestrade.triggers.reach.never_matches`: an
`alertNamespace: Any` route where the admin does not allow one, an `Own` route whose matchers
reject its own namespace) or cannot be used (`InvalidRoute`: a matcher or template the receivers
cannot compile); True (`Valid`) otherwise. The receivers keep writing the counters and
`CreateFailed`; this check only replaces a Ready condition it could have written itself, so it
never hides a receiver's error.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from pydantic import ValidationError

from lestrade.kube import ApiException, Kube, resource_path
from lestrade.resources import condition, set_condition
from lestrade.resources.alertroute import AlertRoute, AlertRouteStatus
from lestrade.resources.constants import ALERTROUTE_PLURAL, GROUP, VERSION
from lestrade.triggers import RouteError, RoutePolicy, compile_route, never_matches
from lestrade.triggers.dispatch import CONDITION_READY
from lestrade.triggers.reach import REASON_ANY_NOT_ALLOWED, REASON_NAMESPACE_EXCLUDED, ready_message

__all__ = ["register", "verdict"]

logger = logging.getLogger(__name__)

_OURS = {"Valid", "InvalidRoute", REASON_ANY_NOT_ALLOWED, REASON_NAMESPACE_EXCLUDED}


def verdict(raw: dict[str, Any], policy: RoutePolicy) -> tuple[bool, str, str]:
    """(ready, reason, message) for a route as stored."""
    try:
        route = AlertRoute.model_validate(raw)
        compile_route(route)
    except RouteError as exc:
        return False, "InvalidRoute", str(exc)
    except ValidationError as exc:
        return False, "InvalidRoute", f"spec: {exc.errors()[0]['msg']}"
    blocked = never_matches(route, policy)
    if blocked is not None:
        return False, *blocked
    return True, "Valid", ready_message(route)


async def check(kube: Kube, raw: dict[str, Any], policy: RoutePolicy) -> bool:
    """Writes the route's Ready condition when it changed; True when it wrote."""
    meta = raw.get("metadata") or {}
    generation = meta.get("generation")
    status = AlertRouteStatus.model_validate(raw.get("status") or {})
    ready, reason, message = verdict(raw, policy)
    before = next((c for c in status.conditions if c.type == CONDITION_READY), None)
    if before is not None and before.reason not in _OURS and status.observed_generation == generation:
        return False  # a receiver's verdict on this generation (CreateFailed) stands
    if before is not None and (
        before.status == ("True" if ready else "False")
        and before.reason == reason
        and before.message == message
        and status.observed_generation == generation
    ):
        return False
    conditions = set_condition(
        status.conditions, condition(CONDITION_READY, ready, reason, message, observed_generation=generation)
    )
    body = {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"conditions": [c.to_wire() for c in conditions], "observedGeneration": generation},
    }
    try:
        await kube.patch(resource_path(ALERTROUTE_PLURAL, meta.get("namespace"), meta.get("name")) + "/status", body)  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status in (404, 409):
            return False  # deleted, or changed meanwhile: the next event checks again
        raise
    return True


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.event(GROUP, VERSION, ALERTROUTE_PLURAL, registry=registry)
    async def route_changed(body: kopf.Body, type: str, memo: Any, **_: Any) -> None:  # noqa: A002
        if type == "DELETED":
            return
        policy = memo.lestrade.engine.settings.triggers.alert_routes
        try:
            await check(memo.lestrade.engine.kube, dict(body), policy)
        except ApiException as exc:
            logger.warning(
                "could not write the Ready condition of AlertRoute %s/%s: %s",
                body.get("metadata", {}).get("namespace"),
                body.get("metadata", {}).get("name"),
                exc.reason,
            )
