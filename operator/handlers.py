"""Kopf wiring for Investigations and Conversations: which handlers exist, what each delegates to.

The same handlers are registered for both kinds:
- a daemon per resource with work to do (an Investigation that has not finished, a
  Conversation with a turn to answer) runs `Supervisor.supervise` (long work never happens in a
  change handler); Kopf stops it promptly when the object is deleted, when the operator exits,
  when a peer with a higher priority takes over (standby replicas), and when the object has no
  work left (its filter stops matching; appending a turn starts a new daemon);
- with shared replicas (`--replicas shared`), every replica has that daemon, but only the
  replica that claimed the object supervises it (`ownership.py`);
- an event handler wakes that daemon on every change (decisions arriving, turns appended, our
  own status landing); finished Investigations are not watched at all (`selection.py`: a
  field selector; one that finishes arrives as DELETED), their TTL has its own watch (`ttl.py`);
- in Job mode, an event handler on the Jobs the operator created wakes the daemon that waits
  for them.

No finalizer in-process: a deleted object's daemon is stopped by the watch (the event handler
sees DELETED and `Feeds.deleted` ends the daemon's work), so Kopf's two finalizer patches per run
(add, remove; each also a watch event for every watcher) are not needed for a prompt stop
(measured by `bench/burst_bench.py`). In Job mode the finalizer stays: the daemon must delete the
run's Jobs (in another namespace, so not garbage-collected with the object) before the object
goes, even if the operator was down when it was deleted. Either way only objects whose run is in
progress carry it (the daemon filter), so settled objects are deleted at once.
Handlers are registered on a registry of their own, so a test can run several operators with
different settings in one process.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass
from typing import Any, cast

import kopf
from kopf._core.intents import handlers as kopf_handlers

from lestrade.operator.base.engine import Engine
from lestrade.operator.mcpservers import daemon as mcpservers
from lestrade.operator.replicas.membership import Membership
from lestrade.operator.replicas.ownership import Ownership
from lestrade.operator.runs.idle import mark_idle
from lestrade.operator.runs.jobs import RUN_UID_LABEL
from lestrade.operator.runs.stopping import configure as configure_stopping
from lestrade.operator.runs.stopping import run_until_stopped
from lestrade.operator.runs.supervisor import Feeds, Supervisor
from lestrade.operator.runs.ttl import TtlReaper
from lestrade.operator.triggers import event_source, route_check, schedules
from lestrade.resources.constants import CONVERSATION_KIND, GROUP, VERSION
from lestrade.resources.keys import FINALIZER
from lestrade.runs.views import KINDS, ConversationView, view_of

__all__ = ["OperatorContext", "FINALIZER", "build_registry", "configure_kopf"]

logger = logging.getLogger(__name__)

ANNOTATION_PREFIX = "lestrade.dev"


@dataclass
class OperatorContext:
    """Everything the handlers share, passed to Kopf as the operator's memo."""

    engine: Engine
    feeds: Feeds
    supervisor: Supervisor
    reaper: TtlReaper
    ownership: Ownership | None = None
    """Shared replicas (`--replicas shared`): runs only the objects this replica claims."""

    @classmethod
    def create(cls, engine: Engine, membership: Membership | None = None) -> OperatorContext:
        feeds = Feeds()
        ownership = Ownership(engine, membership) if membership is not None else None
        return cls(engine, feeds, Supervisor(engine, feeds), TtlReaper(engine.kube), ownership)


def _has_work(body: kopf.Body, **_: Any) -> bool:
    return view_of(body).has_work()


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """Kopf's own essence of an object (spec, labels, annotations), built without first
    deep-copying the whole object: Kopf builds one on every watch event, and a run's status
    and managedFields, which the essence drops anyway, are most of it. The same result as
    Kopf's (a test compares them)."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        if extra_fields:  # fields picked from anywhere, status included: Kopf's own way
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        lean: dict[str, Any] = {key: value for key, value in body.items() if key not in ("metadata", "status")}
        lean["metadata"] = {key: meta[key] for key in ("labels", "annotations", "ownerReferences") if key in meta}
        return super().build(body=kopf.Body(cast(kopf.RawBody, lean)), extra_fields=extra_fields)


def configure_kopf(
    settings: kopf.OperatorSettings,
    *,
    peering_name: str = "lestrade",
    priority: int = 0,
    peering_lifetime: int = 20,
) -> None:
    """Kopf's settings for this operator (events, finalizer, persistence, throttling)."""
    # Our own milestone Events are posted by the attempt; Kopf only posts its warnings.
    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(
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
    # How long a standby peer waits after the active one's last keep-alive before it takes over.
    settings.peering.lifetime = peering_lifetime
    settings.peering.stealth = True
    settings.process.ultimate_exiting_timeout = 30
    configure_stopping(settings)  # a deleted object's daemon stops at once (stopping.py)


def _without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """Kopf puts a finalizer on every object with a daemon and has no option against it; the
    run daemons registered so far do not need one in-process (module docstring), so their
    handlers are re-made without it. Kopf's registry internals are used here: if they change,
    this fails at start-up (and every operator test with it), never silently."""
    spawning = registry._spawning._handlers  # noqa: SLF001 - see the docstring
    for index, handler in enumerate(spawning):
        if isinstance(handler, kopf_handlers.DaemonHandler) and str(handler.id).endswith("-run"):
            spawning[index] = dataclasses.replace(handler, requires_finalizer=False)
    if sum(not h.requires_finalizer for h in spawning) != len(KINDS):
        raise RuntimeError("could not register the run daemons without a finalizer")


def build_registry(job_mode: bool = False) -> kopf.OperatorRegistry:
    """A registry with the handlers of both kinds; the context comes in as `memo.lestrade`."""
    registry = kopf.OperatorRegistry()

    async def changed(type: str, body: kopf.Body, uid: str, memo: Any, **_: Any) -> None:  # noqa: A002
        ctx: OperatorContext = memo.lestrade
        if type == "DELETED" and _has_work(body):
            # Deleted, or finished (it left the field selector): either way its daemon stops
            # (no finalizer holds the object for Kopf).
            ctx.feeds.deleted(uid)
        ctx.feeds.touch(uid)  # TTL timers have a watch of their own (ttl.py)
        if ctx.ownership is not None:
            ctx.ownership.touched(uid)
        settings = ctx.engine.settings
        if (
            type != "DELETED"
            and body.get("kind") == CONVERSATION_KIND  # an Investigation's view is not parsed for nothing
            and settings.runs.select_idle_conversations
            and not settings.jobs.enabled
        ):
            view = view_of(body)
            if isinstance(view, ConversationView) and not view.has_work():
                # Idle with no daemon to say so (answered before this operator started):
                # labelled, it leaves the watch (idle.py).
                await mark_idle(ctx.engine.kube, view)

    async def run(body: kopf.Body, uid: str, stopped: kopf.DaemonStopped, memo: Any, **_: Any) -> None:
        ctx: OperatorContext = memo.lestrade

        def is_deleted() -> bool:
            reason = stopped.reason
            return reason is not None and bool(reason & kopf.DaemonStoppingReason.RESOURCE_DELETED)

        gone = ctx.feeds.gone(uid)
        try:
            if gone.is_set():
                return  # deleted before its daemon started: nothing to run
            if ctx.ownership is None:
                work = ctx.supervisor.supervise(body, is_deleted)
            else:  # shared replicas: supervised only while this replica owns it
                work = ctx.ownership.run(body, ctx.feeds.event(uid), lambda: ctx.supervisor.supervise(body, is_deleted))
            await run_until_stopped(work, stopped, gone)
        finally:
            # Both only matter while the daemon runs (a new daemon rebuilds them).
            ctx.feeds.forget(uid)
            ctx.engine.applied_decisions.pop(uid, None)

    for view_class in KINDS.values():
        kopf.on.event(GROUP, VERSION, view_class.plural, registry=registry)(changed)
        kopf.daemon(
            GROUP,
            VERSION,
            view_class.plural,
            registry=registry,
            when=_has_work,
            cancellation_timeout=10,
            backoff=5,
            id=f"{view_class.plural}-run",
        )(run)

    if not job_mode:
        _without_finalizer(registry)
    schedules.register(registry)
    event_source.register(registry)
    mcpservers.register(registry)
    route_check.register(registry)

    @kopf.on.cleanup(registry=registry)
    async def stop_litellm_worker(**_: Any) -> None:
        """litellm runs a logging task in our loop; Kopf would wait 5 s for it as "hung"."""
        if "litellm" not in sys.modules:
            return  # never imported (no model call yet): nothing runs, and importing it is slow
        try:
            from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER
        except ImportError:
            return
        await GLOBAL_LOGGING_WORKER.stop()

    if job_mode:

        @kopf.on.event(
            "batch",
            "v1",
            "jobs",
            labels={RUN_UID_LABEL: kopf.PRESENT},
            registry=registry,
        )
        async def job_changed(labels: kopf.Labels, memo: Any, **_: Any) -> None:
            ctx: OperatorContext = memo.lestrade
            ctx.feeds.touch(labels[RUN_UID_LABEL])

    return registry
