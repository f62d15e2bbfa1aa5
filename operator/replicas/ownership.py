"""Which replica runs which object, when several share the work (`--replicas shared`).

Every replica has a daemon for every object with work, but only the *owner* supervises it. The
owner is named in the annotation `lestrade.dev/owner` as `<lease>/<lease uid>/<epoch>`
(`membership.Holder`): a claim written as a merge patch carrying the resourceVersion the
replica read, so of two replicas claiming at once exactly one wins (the other gets 409 and
looks again when the winner's write reaches its watch). A replica claims an object only

- when the claim is free, or names a holder that is not alive (`Membership.alive`: its Lease
  expired, is gone, or is of another epoch);
- while it has room: fewer owned objects that are not waiting for a decision than its
  concurrency, counting claims in flight — so the load spreads by itself, and a full replica
  leaves new work to the others;
- after `handoff` seconds (or at once, when the object changes) if another live replica is
  the object's preferred owner (rendezvous hashing over the live Leases): in a burst the
  replicas mostly claim disjoint objects instead of racing for every one.

The owner stops a run whose claim is rewritten to name anyone else after its own (by hand, or
by someone with patch rights on the object); both then see the same watch event, so the
overlap is the event's delivery skew between them. An admission policy reserving the
annotation to the operator's account would close that (not done yet).

An object waiting for a decision stays claimed (its slot is free meanwhile, as with one
replica). The owner keeps supervising until the run has no work left or its Lease is lost
(`Membership.lost`): then the supervision is cancelled before any other replica can call it
dead (renew deadline < lease duration), and the daemon claims again with the new epoch — or
waits, if another replica took the object meanwhile. Whoever takes over resumes from the
transcript like a restarted operator (attempt.py): answered model calls are not asked again,
started tools are not started again, decisions are acted on once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from lestrade.kube import is_conflict, is_not_found, resource_path
from lestrade.operator.base.engine import Engine
from lestrade.operator.replicas.membership import Holder, Membership
from lestrade.resources.keys import OWNER_ANNOTATION
from lestrade.runs.views import ConversationView, RunView, view_of

__all__ = ["OWNER_ANNOTATION", "Ownership", "preferred_owner"]

logger = logging.getLogger(__name__)


def preferred_owner(uid: str, leases: list[str]) -> str | None:
    """Rendezvous hashing: the same answer on every replica that sees the same live Leases,
    and only the objects of a replica that joins or leaves move."""
    if not leases:
        return None
    return max(leases, key=lambda lease: hashlib.sha256(f"{uid}/{lease}".encode()).digest())


def _paused(body: Mapping[str, Any]) -> bool:
    """Waiting for a decision: owned, but using no run slot."""
    return bool(view_of(body).split_decisions()[1])


async def _first(*events: asyncio.Event, timeout: float | None = None) -> None:
    """Waits until any of the events is set (or the timeout passed)."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


class Ownership:
    """This replica's claims: acquiring them, running the owned objects, making room."""

    def __init__(self, engine: Engine, membership: Membership) -> None:
        self.engine = engine
        self.membership = membership
        self.limit = engine.settings.runs.concurrency
        self.handoff = engine.settings.replicas.claim_handoff
        self.owned: dict[str, Mapping[str, Any]] = {}  # uid -> the live body
        self.paused: set[str] = set()  # owned uids waiting for a decision
        self.claiming = 0
        self._room = asyncio.Event()
        self._claimed_at: dict[str, int] = {}  # uid -> resourceVersion our claim was stored at
        self._stolen: dict[str, asyncio.Event] = {}  # uid -> set when the claim names another

    # -- room --------------------------------------------------------------------------------

    def has_room(self) -> bool:
        return len(self.owned) - len(self.paused) + self.claiming < self.limit

    def _made_room(self) -> None:
        self._room.set()
        self._room = asyncio.Event()

    def touched(self, uid: str) -> None:
        """An owned object changed: a pause frees room (its slot is free while it waits)."""
        body = self.owned.get(uid)
        if body is None:
            return
        meta = body.get("metadata") or {}
        mine = self.membership.holder.encode() if self.membership.holder else None
        if (
            view_of(body).resource_version > self._claimed_at.get(uid, 0)
            and (meta.get("annotations") or {}).get(OWNER_ANNOTATION) != mine
        ):
            # Someone rewrote the claim after ours (by hand, or hostile): stop rather than
            # run the object next to whoever it now names.
            stolen = self._stolen.get(uid)
            if stolen is not None and not stolen.is_set():
                logger.warning("%s: its claim no longer names this replica; stopping its run", meta.get("name"))
                stolen.set()
        if _paused(body):
            if uid not in self.paused:
                self.paused.add(uid)
                self._made_room()
        else:
            self.paused.discard(uid)

    # -- running -----------------------------------------------------------------------------

    async def run(
        self,
        body: Mapping[str, Any],
        feed: asyncio.Event,
        supervise: Callable[[], Awaitable[None]],
    ) -> None:
        """Claims the object, then supervises it until it has no work left; again after this
        replica lost and regained its Lease."""
        uid = view_of(body).ref.uid
        while True:
            if not await self._acquire(body, feed):
                return  # nothing to run
            lost = self.membership.lost
            stolen = self._stolen[uid] = asyncio.Event()
            self.owned[uid] = body
            self.touched(uid)
            work = asyncio.ensure_future(supervise())
            stops = {asyncio.ensure_future(lost.wait()), asyncio.ensure_future(stolen.wait())}
            try:
                await asyncio.wait({work, *stops}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for stop in stops:
                    stop.cancel()
                self._stolen.pop(uid, None)
                self._claimed_at.pop(uid, None)
                if not work.done():
                    work.cancel()
                    await asyncio.wait({work})
                self.owned.pop(uid, None)
                self.paused.discard(uid)
                self._made_room()
            if not work.cancelled():
                work.result()
                return
            logger.info(
                "%s: the run stopped (%s)",
                view_of(body).ref.name,
                "claim rewritten" if stolen.is_set() else "this replica lost its lease",
            )

    async def _acquire(self, body: Mapping[str, Any], feed: asyncio.Event) -> bool:
        """Returns once this replica holds the claim (True), or when the object has no work
        left (False). Waits on the object's changes, membership changes and room."""
        handoff_waited = False
        while True:
            feed.clear()
            changes, room = self.membership.changes(), self._room
            view = view_of(body)
            if not view.has_work():
                if not isinstance(view, ConversationView):
                    return False
                await feed.wait()  # Kopf stops this daemon until a turn is appended
                continue
            me = self.membership.holder
            if me is None:  # fenced: wait until the Lease is ours again
                await _first(feed, changes)
                continue
            # The version the claim is judged on is the one the claim is conditioned on: the
            # live body may change during the awaits below (another replica's claim landing).
            read_version = body["metadata"]["resourceVersion"]
            annotations = (body.get("metadata") or {}).get("annotations") or {}
            holder = Holder.decode(annotations.get(OWNER_ANNOTATION))
            if holder == me:
                self._claimed_at[view.ref.uid] = view.resource_version
                return True  # ours (this daemon restarted)
            if holder is not None and await self.membership.alive(holder):
                await _first(feed, changes)
                continue
            if not self.has_room():
                await _first(feed, changes, room)
                continue
            preferred = preferred_owner(view.ref.uid, self.membership.live_leases())
            if not handoff_waited and preferred not in (None, me.lease):
                handoff_waited = True
                await _first(feed, changes, timeout=self.handoff)
                continue
            self.claiming += 1
            try:
                if await self._claim(view, read_version, me):
                    if holder is not None:
                        logger.info(
                            "%s/%s: took over from %s (not alive)", view.ref.namespace, view.ref.name, holder.lease
                        )
                    return True
            finally:
                self.claiming -= 1
            await _first(feed, changes)  # lost the race: the winner's claim is on its way

    async def _claim(self, view: RunView, read_version: str, me: Holder) -> bool:
        path = resource_path(view.plural, view.ref.namespace, view.ref.name)
        patch = {
            "metadata": {
                "resourceVersion": read_version,
                "annotations": {OWNER_ANNOTATION: me.encode()},
            }
        }
        try:
            stored = await self.engine.kube.patch(path, patch)
        except Exception as exc:
            if is_conflict(exc) or is_not_found(exc):
                return False
            raise
        self._claimed_at[view.ref.uid] = view_of(stored).resource_version
        logger.debug("claimed %s/%s as %s", view.ref.namespace, view.ref.name, me.lease)
        return True
