"""The life of one Investigation inside the operator, around its runs.

A Kopf daemon calls `Supervisor.supervise()` for every Investigation that has not finished; it
decides *when* a run may happen and leaves the run itself to `runner` (or to a Job):

- admission: at most `concurrency` runs at once per operator; the others wait in Pending with
  the reason `WaitingForSlot` (first come, first served);
- approvals: while status.pendingApprovals has calls without a decision in spec.decisions, no
  run happens; every change of the object wakes the supervisor to look again, and decisions
  that name unknown or already-decided calls are reported in the `DecisionsAccepted` condition;
- the deadline (startTime + timeout, waiting for approval included) is enforced also while
  nothing runs.

A run releases its slot while it waits for approval, so paused investigations never starve the
others. The supervisor never acts on a status older than its own last write: after a write it
continues from the object the apiserver returned, or waits until the watch shows it.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lestrade.resources.constants import CONDITION_AWAITING_APPROVAL, CONDITION_SUCCEEDED

from .job import INVESTIGATION_UID_LABEL, job_finished, job_manifest, job_name
from .kube import is_conflict, is_not_found
from .recorder import EventRecorder
from .runner import (
    Engine,
    InvestigationRef,
    Outcome,
    deadline_of,
    fail,
    pending_decisions,
    run_investigation,
    timeout_of,
)
from .status import StatusWriter
from .transcript import Transcript

__all__ = ["TERMINAL_PHASES", "CONDITION_DECISIONS_ACCEPTED", "Feeds", "Supervisor", "judge_decisions"]

logger = logging.getLogger(__name__)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
CONDITION_DECISIONS_ACCEPTED = "DecisionsAccepted"


class Feeds:
    """Wakes the supervisor of an object when the object (or its Job) changes."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, uid: str) -> asyncio.Event:
        return self._events.setdefault(uid, asyncio.Event())

    def touch(self, uid: str) -> None:
        event = self._events.get(uid)
        if event is not None:
            event.set()

    def forget(self, uid: str) -> None:
        self._events.pop(uid, None)


async def _wait(event: asyncio.Event, deadline: float | None) -> bool:
    """Waits for the event until the deadline (unix time); False when the deadline passed."""
    timeout = None if deadline is None else max(0.0, deadline - time.time())
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except TimeoutError:
        return False


def _snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(dict(body))


def judge_decisions(body: Mapping[str, Any], applied: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Problems with spec.decisions: unknown ids, calls not waiting, changed decisions."""
    status = body.get("status") or {}
    decisions = (body.get("spec") or {}).get("decisions") or {}
    pending = {p.get("toolCallId") for p in status.get("pendingApprovals") or []}
    known = {c.get("id") for c in status.get("toolCalls") or []}
    problems = []
    for call_id, decision in sorted(decisions.items()):
        approved = bool((decision or {}).get("approved"))
        if call_id in applied:
            before = bool(applied[call_id].get("approved"))
            if before != approved:
                word = "approved" if before else "denied"
                problems.append(f"{call_id} was already {word}; a decision cannot change")
        elif call_id in pending:
            continue
        elif call_id in known:
            problems.append(f"{call_id} is not waiting for a decision")
        else:
            problems.append(f"{call_id} is not a tool call of this investigation")
    return problems


class Supervisor:
    """Admission, approval gate and deadline for each Investigation; see the module docstring."""

    def __init__(self, engine: Engine, feeds: Feeds) -> None:
        self.engine = engine
        self.feeds = feeds
        self.slots = asyncio.Semaphore(engine.settings.concurrency)

    def _writer(self, ref: InvestigationRef, snap: Mapping[str, Any]) -> StatusWriter:
        return StatusWriter(
            self.engine.kube, ref.path, snap.get("status") or {}, generation=ref.generation
        )

    async def supervise(
        self, body: Mapping[str, Any], is_deleted: Callable[[], bool] = lambda: False
    ) -> None:
        """Runs the object (kept up to date by the watch) until it has finished."""
        ref = InvestigationRef.of(body)
        feed = self.feeds.event(ref.uid)
        recorder = EventRecorder(self.engine.kube, ref.involved, self.engine.component)
        try:
            await self._supervise(body, ref, feed, recorder)
        except asyncio.CancelledError:
            if self.engine.settings.job_mode and is_deleted():
                await asyncio.shield(self._delete_jobs(ref))
            raise

    async def _supervise(
        self,
        body: Mapping[str, Any],
        ref: InvestigationRef,
        feed: asyncio.Event,
        recorder: EventRecorder,
    ) -> None:
        settings = self.engine.settings
        latest: dict[str, Any] | None = None  # our own last write, newer than the watch
        while True:
            feed.clear()
            snap = _snapshot(body)
            if latest is not None and _older(snap, latest):
                snap = latest
            ref = InvestigationRef.of(snap)
            status = snap.get("status") or {}
            phase = status.get("phase")
            if phase in TERMINAL_PHASES:
                return

            deadline = deadline_of(snap, settings)
            if deadline is not None and time.time() >= deadline:
                writer = self._writer(ref, snap)
                await fail(
                    writer, recorder, "Timeout",
                    f"the investigation did not finish within its timeout "
                    f"({timeout_of(snap, settings):g}s)",
                )
                return

            if status.get("pendingApprovals"):
                latest = await self._check_decisions(ref, snap, recorder) or latest
                if pending_decisions(snap)[1]:
                    await _wait(feed, deadline)
                    continue

            if phase is None:
                latest = await self._pending(ref, snap, "Accepted", "Accepted; starting")
                snap = latest

            if self.slots.locked() and _reason(snap) != "WaitingForSlot":
                message = (
                    f"Waiting for a free run slot: all {settings.concurrency} are in use"
                )
                latest = await self._pending(ref, snap, "WaitingForSlot", message)
                snap = latest
                recorder.post("Queued", message)

            async with self.slots:
                fresh = _snapshot(body)
                snap = latest if latest is not None and _older(fresh, latest) else fresh
                if settings.job_mode:
                    outcome = await self._run_job(ref, body, snap, feed, recorder)
                else:
                    outcome = await run_investigation(self.engine, snap)
            if outcome != Outcome.AWAITING_APPROVAL:
                return
            # The run paused. Its status write may not have reached the watch yet; continue
            # from the stored object so the pause is never mistaken for "still runnable".
            latest = await self.engine.kube.get(ref.path)

    async def _pending(
        self, ref: InvestigationRef, snap: Mapping[str, Any], reason: str, message: str
    ) -> dict[str, Any]:
        writer = self._writer(ref, snap)
        writer.set_condition(CONDITION_SUCCEEDED, "Unknown", reason, message)
        await writer.milestone(phase="Pending", message=message)
        assert writer.last_object is not None
        return writer.last_object

    async def _check_decisions(
        self, ref: InvestigationRef, snap: Mapping[str, Any], recorder: EventRecorder
    ) -> dict[str, Any] | None:
        """Reports invalid decisions in the DecisionsAccepted condition (and an Event)."""
        if not (snap.get("spec") or {}).get("decisions"):
            return None
        writer = self._writer(ref, snap)
        decided, undecided = pending_decisions(snap)
        if decided and undecided:
            waiting = (
                f"Waiting for decisions: {len(decided)} of {len(decided) + len(undecided)} "
                f"decided; still pending: {', '.join(undecided)}"
            )
            if (snap.get("status") or {}).get("message") != waiting:
                writer.set(message=waiting)
        applied = self.engine.applied_decisions.get(ref.uid)
        if applied is None:
            transcript = Transcript(self.engine.kube, ref.namespace, ref.owner)
            applied = (await transcript.load()).decisions
            self.engine.applied_decisions[ref.uid] = applied
        problems = judge_decisions(snap, applied)
        current = writer.condition_status(CONDITION_DECISIONS_ACCEPTED)
        if problems:
            message = "Ignored decisions: " + "; ".join(problems)
            if _condition_message(snap, CONDITION_DECISIONS_ACCEPTED) != message:
                writer.set_condition(CONDITION_DECISIONS_ACCEPTED, False, "InvalidDecision", message)
                recorder.post("InvalidDecision", message, "Warning")
        elif current == "False":
            writer.set_condition(
                CONDITION_DECISIONS_ACCEPTED, True, "Valid", "Every decision names a call that waited for one"
            )
        await writer.flush()
        return writer.last_object

    # -- Job mode --------------------------------------------------------------------------------

    @property
    def _jobs_path(self) -> str:
        return f"/apis/batch/v1/namespaces/{self.engine.settings.job_namespace}/jobs"

    async def _jobs_of(self, ref: InvestigationRef) -> list[dict[str, Any]]:
        found = await self.engine.kube.get(
            self._jobs_path, labelSelector=f"{INVESTIGATION_UID_LABEL}={ref.uid}"
        )
        return list(found.get("items") or [])

    async def _delete_job(self, name: str) -> None:
        try:
            await self.engine.kube.delete(f"{self._jobs_path}/{name}", propagationPolicy="Background")
        except Exception as exc:
            if not is_not_found(exc):
                raise

    async def _delete_jobs(self, ref: InvestigationRef) -> None:
        try:
            for job in await self._jobs_of(ref):
                await self._delete_job(job["metadata"]["name"])
        except Exception as exc:
            logger.warning("could not delete the Jobs of %s/%s: %s", ref.namespace, ref.name, exc)

    async def _run_job(
        self,
        ref: InvestigationRef,
        body: Mapping[str, Any],
        snap: Mapping[str, Any],
        feed: asyncio.Event,
        recorder: EventRecorder,
    ) -> Outcome:
        """Starts (or re-attaches to) this round's Job and waits until the round is over.

        One Job per spec generation: a new round (after decisions) is a new generation, and an
        operator restarted mid-round finds the round's Job by its name. The round is over when
        the Investigation finished or paused for new decisions (the Job's pod wrote that), or
        when the Job ended without either (then the run failed).
        """
        settings = self.engine.settings
        kube = self.engine.kube
        generation = int(snap["metadata"].get("generation") or 1)
        name = job_name(ref, generation)
        for job in await self._jobs_of(ref):
            if job["metadata"]["name"] != name and not job_finished(job)[0]:
                await self._delete_job(job["metadata"]["name"])  # a stale round's leftover
        path = f"{self._jobs_path}/{name}"
        try:
            job = await kube.get(path)
        except Exception as exc:
            if not is_not_found(exc):
                raise
            deadline = deadline_of(snap, settings)
            left = (deadline - time.time()) if deadline else timeout_of(snap, settings)
            try:
                job = await kube.create(self._jobs_path, job_manifest(settings, ref, generation, left))
                recorder.post("JobCreated", f"running in Job {settings.job_namespace}/{name}")
            except Exception as exc2:
                if not is_conflict(exc2):
                    raise
                job = await kube.get(path)
        while True:
            feed.clear()
            live = _snapshot(body)
            live_phase = (live.get("status") or {}).get("phase")
            if live_phase in TERMINAL_PHASES:
                return Outcome(live_phase)
            if live_phase == "AwaitingApproval" and pending_decisions(live)[1]:
                return Outcome.AWAITING_APPROVAL
            finished, reason, message = job_finished(job)
            if finished:
                break
            await _wait(feed, time.time() + 60)
            try:
                job = await kube.get(path)
            except Exception as exc:
                if not is_not_found(exc):
                    raise
                reason, message = "Deleted", "the Job was deleted"
                break
        # The Job ended; its last status write may still be on its way to the watch.
        fresh = await kube.get(ref.path)
        phase = (fresh.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            return Outcome(phase)
        if phase == "AwaitingApproval" and pending_decisions(fresh)[1]:
            return Outcome.AWAITING_APPROVAL
        writer = self._writer(InvestigationRef.of(fresh), fresh)
        if reason == "DeadlineExceeded":
            return await fail(
                writer, recorder, "Timeout",
                f"the investigation did not finish within its timeout "
                f"({timeout_of(fresh, settings):g}s)",
            )
        return await fail(
            writer, recorder, "JobFailed",
            f"Job {settings.job_namespace}/{name} ended ({reason}) without finishing the run: "
            f"{message or 'see its pod logs'}",
        )


def _resource_version(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _older(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether `a` is an older version of the object than `b` (etcd revisions are ordered)."""
    return _resource_version(a) < _resource_version(b)


def _reason(snap: Mapping[str, Any]) -> str | None:
    for cond in (snap.get("status") or {}).get("conditions") or []:
        if cond.get("type") == CONDITION_SUCCEEDED:
            return cond.get("reason")
    return None


def _condition_message(snap: Mapping[str, Any], type: str) -> str | None:  # noqa: A002
    for cond in (snap.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type:
            return cond.get("message")
    return None
