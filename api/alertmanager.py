"""`POST /api/alertmanager`: Alertmanager's webhook receiver (`webhook_configs`, version 4).

Every firing alert is matched against the AlertRoutes of every namespace, as
`lestrade.triggers.reach` decides: a route sees the alerts whose `namespace` label is its own
namespace (`alertNamespace: Own`), and `Any` routes are honoured in the API's namespace or where
the admin allows (`LESTRADE_ALERT_ROUTES_ANY_NAMESPACES`, `..._ALL_NAMESPACES`); a route that
can see nothing says why in its Ready condition. `lestrade.triggers` creates one
Investigation per alert fingerprint and route within the route's dedup window, under its limits,
and records resolved alerts on their Investigations. Deterministic names make the receiver
idempotent: Alertmanager redelivers on any non-2xx answer and several API replicas may receive
the same group, and neither ever creates a duplicate. Authentication is the API's own
(`auth.py`): the caller must be allowed to create Investigations; the Investigations of the
API namespace's routes are created as the caller, those of a route in another namespace by the
API's own identity (that route's owner asked for them, and it only sees alerts about its own
namespace unless the admin allowed more); the route's status and the resolution bookkeeping are
written by the API's own identity (the chart grants it that). Without the right to list routes
cluster-wide the API falls back to its own namespace's routes (a warning in its log).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from lestrade.api.base.auth import authorize, writer_for
from lestrade.api.holmes.chats import ClientError
from lestrade.api.holmes.services import ServicesDep, services
from lestrade.kube import ApiException, resource_path
from lestrade.resources import INVESTIGATION_PLURAL
from lestrade.resources.constants import ALERTROUTE_PLURAL
from lestrade.triggers import Alert, Dispatcher, RoutePolicy

__all__ = ["router", "AlertReceiverSettings", "WebhookPayload"]

logger = logging.getLogger(__name__)
router = APIRouter()

MAX_ALERTS = 5000
LabelName = Annotated[str, StringConstraints(max_length=1024)]
LabelValue = Annotated[str, StringConstraints(max_length=16384)]


@dataclass(frozen=True)
class AlertReceiverSettings:
    all_namespaces: bool = False
    """true: routes with `alertNamespace: Any` are honoured in every namespace (Own routes
    always are); false: only in the API's namespace and `any_namespaces`."""
    any_namespaces: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AlertReceiverSettings:
        policy = RoutePolicy.from_env("", env)
        return cls(
            all_namespaces=policy.any_namespaces is None, any_namespaces=tuple(sorted(policy.any_namespaces or ()))
        )

    def policy(self, api_namespace: str) -> RoutePolicy:
        return RoutePolicy(api_namespace, None if self.all_namespaces else frozenset(self.any_namespaces))


MAX_ALERT_BYTES = 256 * 1024
"""Labels and annotations of one alert together: they are copied into an Investigation, an
etcd object of at most 1.5 MiB."""


class WebhookAlert(BaseModel):
    """One alert of the webhook payload."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="after")
    def _bounded(self) -> WebhookAlert:
        size = sum(len(k) + len(v) for k, v in (*self.labels.items(), *self.annotations.items()))
        if size > MAX_ALERT_BYTES:
            raise ValueError(f"labels and annotations take {size} characters; at most {MAX_ALERT_BYTES}")
        return self

    status: Literal["firing", "resolved"]
    labels: dict[LabelName, LabelValue] = Field(max_length=256)
    annotations: dict[LabelName, LabelValue] = Field(default_factory=dict, max_length=256)
    startsAt: datetime | None = None
    endsAt: datetime | None = None
    generatorURL: str = Field(default="", max_length=4096)
    fingerprint: str = Field(default="", max_length=128)


class WebhookPayload(BaseModel):
    """Alertmanager's webhook body, version 4."""

    model_config = ConfigDict(extra="ignore")

    version: Literal["4"] = Field(description='The payload version; Alertmanager sends "4".')
    status: Literal["firing", "resolved"] = "firing"
    receiver: str = Field(default="", max_length=1024)
    groupKey: str = Field(default="", max_length=16384)
    truncatedAlerts: int = 0
    externalURL: str = Field(default="", max_length=4096)
    alerts: list[WebhookAlert] = Field(max_length=MAX_ALERTS)


def _moment(value: datetime | None) -> datetime | None:
    """A time in UTC, or None: Alertmanager sends 0001-01-01 for "no end", and a time that UTC
    cannot hold (year 9999 at -14:00) or without a zone is not worth a failed webhook."""
    if value is None or value.tzinfo is None or value.year <= 1:
        return None
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


def _alert(item: WebhookAlert, payload: WebhookPayload) -> Alert:
    extra: dict[str, object] = {"receiver": payload.receiver}
    if payload.externalURL:
        extra["externalURL"] = payload.externalURL
    return Alert(
        labels=dict(item.labels),
        annotations=dict(item.annotations),
        status=item.status,
        starts_at=_moment(item.startsAt),
        ends_at=_moment(item.endsAt),
        generator_url=item.generatorURL,
        given_fingerprint=item.fingerprint,
        extra=extra,
    )


def _dispatcher(request: Request) -> Dispatcher:
    state = request.app.state
    dispatcher = getattr(state, "alert_dispatcher", None)
    if dispatcher is None:
        dispatcher = state.alert_dispatcher = Dispatcher(services(request).kube)
    return dispatcher


def _settings(request: Request) -> AlertReceiverSettings:
    settings: AlertReceiverSettings = request.app.state.settings.alerts
    return settings


async def _routes(kube: Any, api_namespace: str) -> list[dict[str, Any]]:
    """Every namespace's routes; the API namespace's alone when the API may not list them all."""
    try:
        listing = await kube.get(resource_path(ALERTROUTE_PLURAL, None))
    except ApiException as exc:
        if exc.status != 403:
            raise
        logger.warning(
            "alertmanager webhook: may not list AlertRoutes cluster-wide; only the routes of "
            "namespace %s are consulted",
            api_namespace,
        )
        listing = await kube.get(resource_path(ALERTROUTE_PLURAL, api_namespace))
    return list(listing.get("items") or [])


@router.post("/api/alertmanager")
async def alertmanager(payload: WebhookPayload, request: Request, svc: ServicesDep) -> JSONResponse:
    """Alertmanager webhook: firing alerts matching an AlertRoute become Investigations.
    Answers what was matched, created, deduplicated, dropped and resolved, per route."""
    refusal = await authorize(request, "create", INVESTIGATION_PLURAL)
    if refusal:
        raise ClientError(403, "authorization", refusal)
    caller = writer_for(request, svc.kube)
    try:
        routes = await _routes(svc.kube, svc.namespace)
        result = await _dispatcher(request).dispatch(
            routes,
            [_alert(a, payload) for a in payload.alerts],
            policy=_settings(request).policy(svc.namespace),
            creator_for=lambda namespace: caller if namespace == svc.namespace else svc.kube,
        )
    except ApiException as exc:
        # Alertmanager retries a 5xx; the retry is safe (names are deterministic).
        logger.warning("alertmanager webhook: Kubernetes API error %s %s", exc.status, exc.reason)
        return JSONResponse(
            {"detail": f"the Kubernetes API refused or failed: {exc.status} {exc.reason}"},
            status_code=503 if exc.status >= 500 or exc.status == 429 else 502,
        )
    return JSONResponse(result.as_dict())
