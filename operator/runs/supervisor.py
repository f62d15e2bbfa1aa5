"""The life of one run's resource inside the operator, around its attempts — for both kinds.

A Kopf daemon calls `Supervisor.supervise()` for every Investigation that has not finished and
every Conversation with a turn to answer; it decides *when* an attempt may happen and leaves
the attempt itself to `attempt.py` (or to a Job, `jobs.py`):

- admission: at most `concurrency` attempts at once per operator, Investigations and
  Conversation turns alike; the others wait in Pending with the reason `WaitingForSlot`
  (first come, first served);
- approvals: while status.pendingApprovals has calls without a decision in spec.decisions, no
  attempt happens; every change of the object wakes the supervisor to look again, and
  decisions that name unknown or already-decided calls are reported in the
  `DecisionsAccepted` condition;
- the deadline (start of the run or turn + timeout, waiting for approval included) is
  enforced also while nothing runs.

An attempt releases its slot while it waits for approval, so paused runs never starve the
others. The supervisor never acts on a status older than its own last write: after a write it
continues from the object the apiserver returned, or waits until the watch shows it. When a
Conversation has nothing to answer, the supervisor waits: Kopf stops the daemon (its filter no
longer matches) and starts a new one when a turn is appended.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lestrade.kube import resource_path
from lestrade.operator.base.engine import Engine
from lestrade.operator.base.metrics import APPROVALS
from lestrade.operator.base.recorder import EventRecorder
from lestrade.operator.runs.attempt import Outcome, fail, run_attempt, writer_for
from lestrade.operator.runs.idle import mark_idle
from lestrade.operator.runs.jobs import JobRounds
from lestrade.operator.status.projection import ConversationProjection, projection_for
from lestrade.runs.records import ErrorRecord
from lestrade.runs.transcript import RecordType, Transcript
from lestrade.runs.views import ConversationView, RunView, view_of
from lestrade.timefmt import now_iso

__all__ = ["CONDITION_DECISIONS_ACCEPTED", "Feeds", "Supervisor", "judge_decisions"]

logger = logging.getLogger(__name__)

CONDITION_DECISIONS_ACCEPTED = "DecisionsAccepted"


FENCED_PAUSE = 1.0
"""Seconds an object whose attempt was fenced waits (unless it changes) before the next one."""

GONE_MEMORY = 60.0
"""Seconds a deletion mark waits for a daemon about to start (it starts within a moment)."""


class Feeds:
    """Wakes the supervisor of an object when the object (or its Job) changes, and tells its
    daemon when the watch saw the object deleted (`gone`)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._gone: dict[str, asyncio.Event] = {}

    def event(self, uid: str) -> asyncio.Event:
        return self._events.setdefault(uid, asyncio.Event())

    def touch(self, uid: str) -> None:
        event = self._events.get(uid)
        if event is not None:
            event.set()

    def gone(self, uid: str) -> asyncio.Event:
        """Set once the watch has seen the object deleted."""
        return self._gone.setdefault(uid, asyncio.Event())

    def deleted(self, uid: str) -> None:
        """The watch saw the object deleted: its daemon (running or about to start) stops.
        Only called for objects with work, whose daemon forgets this again when it ends; every
        finished Investigation also comes here once (it leaves the operator's selection, often
        after its daemon ended), so the mark is dropped after `GONE_MEMORY` seconds in any case
        (a daemon holds its own reference to the event; the uid never comes back)."""
        self.gone(uid).set()
        self.touch(uid)
        asyncio.get_running_loop().call_later(GONE_MEMORY, self._gone.pop, uid, None)

    def forget(self, uid: str) -> None:
        self._events.pop(uid, None)
        self._gone.pop(uid, None)


async def wait_for(event: asyncio.Event, deadline: float | None) -> bool:
    """Waits for the event until the deadline (unix time); False when the deadline passed."""
    timeout = None if deadline is None else max(0.0, deadline - time.time())
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except TimeoutError:
        return False


def judge_decisions(view: RunView, applied: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Problems with spec.decisions: unknown ids, calls not waiting, changed decisions."""
    pending = set(view.pending_ids)
    known = {c.get("id") for c in view.status.get("toolCalls") or []}
    problems = []
    what = view.kind.lower()
    for call_id, decision in sorted(view.decisions.items()):
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
            problems.append(f"{call_id} is not a tool call of this {what}")
    return problems


def _relays_wait_inside(view: RunView) -> bool:
    """A harness session's relays wait inside its attempt (`harness/gate.py`): relays that
    status still lists when no attempt runs are those of an attempt a restart ended. The next
    attempt asks the gate again (taking an answer given meanwhile from spec.decisions) and
    withdraws those of the subagents it does not resume (`harness/agents.py`): waiting here
    for all of them would keep the session waiting for agents that no longer run."""
    return isinstance(view, ConversationView) and getattr(view.spec, "harness", None) is not None


class Supervisor:
    """Admission, approval gate and deadline for each run; see the module docstring."""

    def __init__(self, engine: Engine, feeds: Feeds) -> None:
        self.engine = engine
        self.feeds = feeds
        self.slots = asyncio.Semaphore(engine.settings.runs.concurrency)
        self.jobs = JobRounds(engine)

    async def supervise(self, body: Mapping[str, Any], is_deleted: Callable[[], bool] = lambda: False) -> None:
        """Runs the object (kept up to date by the watch) while it has work."""
        view = view_of(body)
        feed = self.feeds.event(view.ref.uid)
        recorder = EventRecorder(
            self.engine.kube, view.ref.involved, self.engine.component, self.engine.settings.pod_name
        )
        try:
            await self._supervise(body, feed, recorder)
        except asyncio.CancelledError:
            if self.engine.settings.jobs.enabled and is_deleted():
                await asyncio.shield(self.jobs.delete_all(view.ref))
            raise
        finally:
            APPROVALS.forget(view.ref.uid)

    def _current(self, body: Mapping[str, Any], latest: dict[str, Any] | None) -> RunView:
        """The newest version known: the watch's, unless our own last write is newer."""
        view = view_of(copy.deepcopy(dict(body)))
        if latest is not None and view.resource_version < view_of(latest).resource_version:
            return view_of(latest)
        return view

    async def _supervise(self, body: Mapping[str, Any], feed: asyncio.Event, recorder: EventRecorder) -> None:
        settings = self.engine.settings
        latest: dict[str, Any] | None = None  # our own last write, newer than the watch
        while True:
            feed.clear()
            view = self._current(body, latest)
            if not view.pending_ids:
                APPROVALS.forget(view.ref.uid)  # settled otherwise (timeout, failure)
            if not view.has_work():
                if isinstance(view, ConversationView):
                    if settings.runs.select_idle_conversations and not settings.jobs.enabled:
                        await mark_idle(self.engine.kube, view)  # it leaves Kopf's watch (idle.py)
                    await feed.wait()  # Kopf stops this daemon until a turn is appended
                    continue
                return

            deadline = view.deadline(settings.runs.default_timeout)
            if deadline is not None and time.time() >= deadline:
                latest = await self._time_out(view, recorder) or latest
                continue

            if view.pending_ids and not _relays_wait_inside(view):
                latest = await self._check_decisions(view, recorder) or latest
                undecided = view.split_decisions()[1]
                if undecided:
                    APPROVALS.waiting(view.ref.uid, view.kind, len(undecided))
                    await wait_for(feed, deadline)
                    continue
                APPROVALS.decided(view.ref.uid)

            if view.unaccepted and settings.jobs.enabled:
                # A Job takes a while to start: status says at once that the run was seen. In
                # the operator's own process a free slot starts the run, whose first write says
                # Running (a second write here would only cost the apiserver and every watcher);
                # no free slot writes WaitingForSlot below.
                latest = await self._pending(view, "Accepted", "Accepted; starting")
                view = view_of(latest)

            if self.slots.locked() and _reason(view) != "WaitingForSlot":
                message = f"Waiting for a free run slot: all {settings.runs.concurrency} are in use"
                latest = await self._pending(view, "WaitingForSlot", message)
                recorder.post("Queued", message)

            async with self.slots:
                view = self._current(body, latest)
                if settings.jobs.enabled:
                    outcome, written = await self.jobs.run_round(view, body, feed, recorder)
                else:
                    outcome, written = await run_attempt(self.engine, view.body)  # type: ignore[assignment]
            if outcome == Outcome.FENCED:
                # Someone else wrote the transcript: look again once the object changes (or
                # after a moment), from the transcript as it is then.
                await wait_for(feed, time.time() + FENCED_PAUSE)
            # Its status write may not have reached the watch yet; continue from the stored
            # object so a pause (or the end) is never mistaken for "still runnable".
            latest = written or await self.engine.kube.get(_path(view))

    async def _time_out(self, view: RunView, recorder: EventRecorder) -> dict[str, Any] | None:
        """The deadline passed while no attempt ran (waiting for approval or a slot): the end is
        recorded in the transcript first, then status settles from it — so no call is left
        showing `approval_required` on a failed run."""
        what = "turn" if isinstance(view, ConversationView) else "investigation"
        message = f"the {what} did not finish within its timeout ({view.timeout(self.engine.settings.runs.default_timeout):g}s)"
        transcript = Transcript(
            self.engine.kube,
            view.ref.namespace,
            view.ref.owner,
            chunk_limit=self.engine.settings.status.transcript_chunk_bytes,
            requester=view.ref.requester,
        )
        state = await transcript.load()
        projection = projection_for(writer_for(self.engine, view), view)
        if isinstance(projection, ConversationProjection):
            if projection.index not in state.turns:
                state = None  # type: ignore[assignment] # the turn never started: nothing of it is in the transcript
            else:
                projection.attach(state)
        if state is not None:
            transcript.append(ErrorRecord(t=RecordType.ERROR, reason="Timeout", message=message, at=now_iso()))
            await transcript.sync()
        await fail(projection, recorder, "Timeout", message, state)
        return projection.writer.last_object

    async def _pending(self, view: RunView, reason: str, message: str) -> dict[str, Any]:
        writer = writer_for(self.engine, view)
        projection_for(writer, view).pending(reason, message)
        await writer.flush()
        assert writer.last_object is not None
        return writer.last_object

    async def _check_decisions(self, view: RunView, recorder: EventRecorder) -> dict[str, Any] | None:
        """Reports invalid decisions in the DecisionsAccepted condition (and an Event)."""
        if not view.decisions:
            return None
        writer = writer_for(self.engine, view)
        decided, undecided = view.split_decisions()
        if decided and undecided:
            waiting = (
                f"Waiting for decisions: {len(decided)} of {len(decided) + len(undecided)} "
                f"decided; still pending: {', '.join(undecided)}"
            )
            if view.status.get("message") != waiting:
                writer.set(message=waiting)
        applied = self.engine.applied_decisions.get(view.ref.uid)
        if applied is None:
            transcript = Transcript(self.engine.kube, view.ref.namespace, view.ref.owner, requester=view.ref.requester)
            applied = (await transcript.load()).decisions
            self.engine.applied_decisions[view.ref.uid] = applied
        problems = judge_decisions(view, applied)
        current = writer.condition_status(CONDITION_DECISIONS_ACCEPTED)
        if problems:
            message = "Ignored decisions: " + "; ".join(problems)
            if (view.condition(CONDITION_DECISIONS_ACCEPTED) or {}).get("message") != message:
                writer.set_condition(CONDITION_DECISIONS_ACCEPTED, False, "InvalidDecision", message)
                recorder.post("InvalidDecision", message, "Warning")
        elif current == "False":
            writer.set_condition(
                CONDITION_DECISIONS_ACCEPTED,
                True,
                "Valid",
                "Every decision names a call that waited for one",
            )
        await writer.flush()
        return writer.last_object


def _path(view: RunView) -> str:
    return resource_path(view.plural, view.ref.namespace, view.ref.name)


def _reason(view: RunView) -> str | None:
    for type_ in ("Succeeded", "Answered"):
        cond = view.condition(type_)
        if cond is not None:
            return cond.get("reason")
    return None
