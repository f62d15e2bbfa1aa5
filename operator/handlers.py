"""Kopf wiring for Investigations: which handlers exist and what each one delegates to.

- a daemon per Investigation that has not finished runs `Supervisor.supervise` (long work never
  happens in a change handler); Kopf stops it promptly when the object is deleted, when the
  operator exits, and when a peer with a higher priority takes over (standby replicas);
- an event handler wakes that daemon on every change (decisions arriving, our own status
  landing) and arms the TTL timer of finished objects;
- in Job mode, an event handler on the Jobs the operator created wakes the daemon that waits
  for them.

The daemon filter (`phase` not finished) means Kopf only puts its finalizer on objects whose
run is in progress, so finished Investigations carry no finalizer and are deleted at once.
Handlers are registered on a registry of their own, so a test can run several operators with
different settings in one process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import kopf

from lestrade.resources.constants import GROUP, INVESTIGATION_PLURAL, VERSION

from .job import INVESTIGATION_UID_LABEL
from .runner import Engine
from .supervisor import TERMINAL_PHASES, Feeds, Supervisor
from .ttl import TtlReaper

__all__ = ["OperatorContext", "FINALIZER", "build_registry", "configure_kopf"]

logger = logging.getLogger(__name__)

FINALIZER = "lestrade.dev/run"
ANNOTATION_PREFIX = "lestrade.dev"


@dataclass
class OperatorContext:
    """Everything the handlers share, passed to Kopf as the operator's memo."""

    engine: Engine
    feeds: Feeds
    supervisor: Supervisor
    reaper: TtlReaper

    @classmethod
    def create(cls, engine: Engine) -> OperatorContext:
        feeds = Feeds()
        return cls(engine, feeds, Supervisor(engine, feeds), TtlReaper(engine.kube))


def _active(status: dict[str, Any], **_: Any) -> bool:
    return status.get("phase") not in TERMINAL_PHASES


def configure_kopf(
    settings: kopf.OperatorSettings, *, peering_name: str = "lestrade", priority: int = 0
) -> None:
    """Kopf's settings for this operator (events, finalizer, persistence, throttling)."""
    # Our own milestone Events are posted by the runner; Kopf only posts its warnings.
    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Throttle objects whose processing keeps failing, and reconnect broken watches calmly.
    settings.queueing.error_delays = (1, 2, 5, 10, 30, 60)
    settings.watching.reconnect_backoff = 1.0
    settings.watching.server_timeout = 600
    settings.watching.client_timeout = 660
    settings.networking.error_backoffs = (0.5, 1, 2, 5, 10)
    settings.peering.name = peering_name
    settings.peering.priority = priority
    settings.peering.lifetime = 20
    settings.peering.stealth = True
    settings.process.ultimate_exiting_timeout = 30


def build_registry(job_mode: bool = False) -> kopf.OperatorRegistry:
    """A registry with the Investigation handlers; the context comes in as `memo.lestrade`."""
    registry = kopf.OperatorRegistry()

    @kopf.on.event(GROUP, VERSION, INVESTIGATION_PLURAL, registry=registry)
    async def investigation_changed(type: str, body: kopf.Body, uid: str, memo: Any, **_: Any) -> None:  # noqa: A002
        ctx: OperatorContext = memo.lestrade
        ctx.feeds.touch(uid)
        if type == "DELETED":
            ctx.reaper.forget(uid)
        else:
            ctx.reaper.consider(body)

    @kopf.daemon(
        GROUP,
        VERSION,
        INVESTIGATION_PLURAL,
        registry=registry,
        when=_active,
        cancellation_timeout=10,
        backoff=5,
    )
    async def investigation_run(
        body: kopf.Body, uid: str, stopped: kopf.DaemonStopped, memo: Any, **_: Any
    ) -> None:
        ctx: OperatorContext = memo.lestrade

        def is_deleted() -> bool:
            reason = stopped.reason
            return reason is not None and bool(reason & kopf.DaemonStoppingReason.RESOURCE_DELETED)

        try:
            await ctx.supervisor.supervise(body, is_deleted)
        finally:
            # Both only matter while the daemon runs (a new daemon rebuilds them).
            ctx.feeds.forget(uid)
            ctx.engine.applied_decisions.pop(uid, None)

    @kopf.on.cleanup(registry=registry)
    async def stop_litellm_worker(**_: Any) -> None:
        """litellm runs a logging task in our loop; Kopf would wait 5 s for it as "hung"."""
        try:
            from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER
        except ImportError:
            return
        await GLOBAL_LOGGING_WORKER.stop()

    if job_mode:

        @kopf.on.event(
            "batch", "v1", "jobs",
            labels={INVESTIGATION_UID_LABEL: kopf.PRESENT},
            registry=registry,
        )
        async def job_changed(labels: kopf.Labels, memo: Any, **_: Any) -> None:
            ctx: OperatorContext = memo.lestrade
            ctx.feeds.touch(labels[INVESTIGATION_UID_LABEL])

    return registry
