"""Which operator replicas are alive: one coordination.k8s.io Lease per replica (shared mode).

Each replica holds a Lease named after itself (`<group>-<replica>`, labelled
`lestrade.dev/replicas=<group>`) and renews it every `renew_interval`. A replica is *alive* for
the others while its Lease keeps changing: an observer remembers when it first saw the Lease's
current `renewTime` on its own monotonic clock and calls the holder dead once that value has
stayed the same for `leaseDurationSeconds` (the client-go leader-election rule: clocks of
different machines are never compared), or once the Lease is gone (deleted on a clean stop, or
by a survivor tidying up after a dead replica).

A replica that cannot renew within `renew_deadline` (shorter than the duration) *fences*
itself: `lost` fires, the replica's runs stop, and the epoch it claimed objects with is burned.
Its next successful write of the Lease starts a new epoch (`leaseTransitions` + 1), so claims
made before the fence never become valid again, even if nobody else took them meanwhile
(`ownership.py` re-claims with a precondition). Claims name the Lease's uid too, so a Lease
deleted and re-created (same name) does not revive old claims either.

Before calling a holder dead, the observer reads the Lease again (a quorum read at most
`FRESH_READ` seconds old): a replica whose own poll stalled (a blocked event loop) never takes
work from a replica that kept renewing.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lestrade.kube import Kube, api_path, is_conflict, is_not_found
from lestrade.resources.keys import REPLICAS_LABEL

__all__ = ["Holder", "Membership", "REPLICAS_LABEL"]

logger = logging.getLogger(__name__)

LEASE_API = "coordination.k8s.io/v1"
FRESH_READ = 1.0
"""Seconds a Lease read stays good enough to call its holder dead (well below the margin
between renew deadline and lease duration)."""


def _dns_name(text: str) -> str:
    """A valid object name from a host or pod name (lowercase, `[a-z0-9.-]`, at most 253)."""
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    return cleaned[:253].rstrip("-.") or "replica"


@dataclass(frozen=True)
class Holder:
    """What a claim names: a replica's Lease (name and uid) and its epoch."""

    lease: str
    uid: str
    epoch: int

    def encode(self) -> str:
        return f"{self.lease}/{self.uid}/{self.epoch}"

    @classmethod
    def decode(cls, text: str | None) -> Holder | None:
        """None for anything that is not a well-formed claim (written by hand, or hostile)."""
        parts = (text or "").split("/")
        if len(parts) != 3 or not parts[0] or not parts[1] or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]))


@dataclass
class _Seen:
    """One Lease as this replica last observed it."""

    uid: str
    epoch: int
    renew_time: str
    duration: float
    since: float  # monotonic time this replica first saw this renewTime
    read_at: float  # monotonic time of the read that last confirmed it
    announced: bool = False  # its death has woken the claim waiters


class Membership:
    """This replica's Lease (created, renewed, fenced, deleted on stop) and its view of the
    others'. `changed` fires (a new Event each time) when a replica dies or this one regains
    its Lease, so claims waiting on a holder are judged again."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        group: str,
        replica: str,
        duration: float,
        renew_deadline: float,
        renew_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not renew_interval < renew_deadline < duration:
            raise ValueError(
                "lease timing: renew interval < renew deadline < lease duration is required "
                f"(got {renew_interval:g} s, {renew_deadline:g} s, {duration:g} s)"
            )
        self.kube = kube
        self.namespace = namespace
        self.group = group
        self.name = _dns_name(f"{group}-{replica}")
        self.duration = duration
        self.renew_deadline = renew_deadline
        self.renew_interval = renew_interval
        self._clock = clock
        self._lease: dict[str, Any] | None = None
        self._renewed_at = float("-inf")  # when the last successful write was *sent*
        self._fenced = True  # until the Lease is first held
        self.holder: Holder | None = None
        self.lost = asyncio.Event()
        """Set while this replica may not run anything (before start, after a fence)."""
        self.lost.set()
        self._changed = asyncio.Event()
        self._seen: dict[str, _Seen] = {}
        self._known_dead: set[Holder] = set()  # claims' holders found dead (bounded: see observe)
        self._task: asyncio.Task[None] | None = None

    # -- this replica's Lease ------------------------------------------------------------------

    def _path(self, name: str = "") -> str:
        return api_path(LEASE_API, "leases", self.namespace, name)

    async def start(self) -> None:
        """Takes the Lease (a new epoch) and keeps renewing it in the background."""
        await self._acquire()
        self._task = asyncio.create_task(self._keep(), name="lease renewal")

    async def stop(self) -> None:
        """Stops renewing and deletes the Lease, so the others take over at their next poll
        instead of after the lease duration. Call only once this replica's runs have stopped."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._fenced, self.holder = True, None
        self.lost.set()
        if self._lease is not None:
            meta = self._lease["metadata"]
            try:
                await self.kube.request(
                    "DELETE",
                    self._path(self.name),
                    {"preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}},
                )
            except Exception as exc:  # it expires on its own
                logger.info("could not delete lease %s: %s", self.name, exc)

    def _body(self, epoch: int, acquire_time: str) -> dict[str, Any]:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # MicroTime
        return {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {REPLICAS_LABEL: self.group}},
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": max(1, round(self.duration)),
                "acquireTime": acquire_time or now,
                "renewTime": now,
                "leaseTransitions": epoch,
            },
        }

    async def _acquire(self) -> None:
        """A new epoch: create the Lease, or bump `leaseTransitions` of the existing one."""
        sent = self._clock()
        try:
            current = await self.kube.get(self._path(self.name))
        except Exception as exc:
            if not is_not_found(exc):
                raise
            current = None
        if current is None:
            stored = await self.kube.create(self._path(), self._body(0, ""))
        else:
            epoch = int((current.get("spec") or {}).get("leaseTransitions") or 0) + 1
            body = self._body(epoch, "")
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            stored = await self.kube.request("PUT", self._path(self.name), body)
        self._held(stored, sent)

    async def _renew(self) -> None:
        assert self._lease is not None
        sent = self._clock()
        spec = self._lease["spec"]
        body = self._body(int(spec["leaseTransitions"]), spec.get("acquireTime") or "")
        body["metadata"]["resourceVersion"] = self._lease["metadata"]["resourceVersion"]
        stored = await self.kube.request("PUT", self._path(self.name), body)
        if self._clock() - sent > self.renew_interval:
            logger.info("renewing lease %s took %.1f s", self.name, self._clock() - sent)
        self._held(stored, sent)

    def _held(self, stored: dict[str, Any], sent: float) -> None:
        self._lease = stored
        self._renewed_at = sent
        holder = Holder(self.name, stored["metadata"]["uid"], int(stored["spec"]["leaseTransitions"]))
        if self._fenced:
            self._fenced = False
            self.holder = holder
            self.lost = asyncio.Event()
            logger.info("holding lease %s (epoch %d)", self.name, holder.epoch)
            self._wake()

    def _fence(self, why: str) -> None:
        if not self._fenced:
            logger.warning("lease %s lost (%s): stopping this replica's runs", self.name, why)
        self._fenced = True
        self.holder = None
        self.lost.set()

    @property
    def fenced(self) -> bool:
        return self._fenced

    async def _keep(self) -> None:
        """Renews every `renew_interval`; fences once `renew_deadline` passed since the last
        renewal that was sent and succeeded; after a fence, only a new epoch restores it."""
        while True:
            if not self._fenced:
                left = self._renewed_at + self.renew_deadline - self._clock()
                try:
                    await asyncio.wait_for(self._renew(), timeout=max(0.05, left))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # 409: someone else wrote our Lease (a replica with the same name?).
                    if is_conflict(exc) or self._clock() >= self._renewed_at + self.renew_deadline:
                        self._fence(f"renewal failed: {exc!r}")
                    else:
                        logger.info("renewing lease %s failed, retrying: %r", self.name, exc)
                        await asyncio.sleep(min(0.2 * self.renew_interval, max(0.0, left)))
                        continue
                if self._clock() >= self._renewed_at + self.renew_deadline:
                    self._fence("renewed too late")
            if self._fenced:
                try:
                    await self._acquire()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    logger.info("re-acquiring lease %s failed: %r", self.name, exc)
            try:
                await self.observe()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.info("listing replica leases failed: %r", exc)
            await asyncio.sleep(self.renew_interval)

    # -- the others ------------------------------------------------------------------------------

    def changes(self) -> asyncio.Event:
        """An Event set at the next change of membership (wait on it, then ask again)."""
        return self._changed

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _record(self, lease: dict[str, Any], now: float) -> _Seen:
        meta, spec = lease["metadata"], lease.get("spec") or {}
        name = meta["name"]
        renew = str(spec.get("renewTime") or "")
        epoch = int(spec.get("leaseTransitions") or 0)
        seen = self._seen.get(name)
        if seen is None or (seen.uid, seen.epoch, seen.renew_time) != (meta["uid"], epoch, renew):
            seen = _Seen(meta["uid"], epoch, renew, float(spec.get("leaseDurationSeconds") or 15), now, now)
            self._seen[name] = seen
        seen.read_at = now
        return seen

    async def observe(self) -> None:
        """Lists the group's Leases; wakes claim waiters when one has died; deletes the Leases
        of replicas dead for a while (pods of past rollouts)."""
        now = self._clock()
        listing = await self.kube.get(self._path(), labelSelector=f"{REPLICAS_LABEL}={self.group}")
        present = set()
        died = False
        for lease in listing.get("items") or []:
            name = lease["metadata"]["name"]
            present.add(name)
            if name == self.name:
                continue
            seen = self._record(lease, now)
            dead_for = now - seen.since - seen.duration
            if dead_for >= 0 and not seen.announced:
                seen.announced = died = True
            if dead_for >= seen.duration:  # dead twice as long as its lease: tidy up
                await self._delete_dead(lease)
        for name in set(self._seen) - present:
            del self._seen[name]
            died = True
        self._known_dead = {h for h in self._known_dead if h.lease in present}
        if died:
            self._wake()

    async def _delete_dead(self, lease: dict[str, Any]) -> None:
        meta = lease["metadata"]
        try:
            await self.kube.request(
                "DELETE",
                self._path(meta["name"]),
                {"preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}},
            )
        except Exception as exc:  # renewed meanwhile, or another replica deleted it first
            logger.debug("not deleting lease %s: %s", meta["name"], exc)

    async def alive(self, holder: Holder) -> bool:
        """Whether the claim's holder may still be running it. This replica's own current
        epoch is alive while it is not fenced; any other is judged from a recent read. A death
        learnt here first (not from `observe`) wakes the other waiters too: they may wait on
        the same holder, and `observe` will not announce a Lease it no longer knows."""
        if holder.lease == self.name:
            return not self._fenced and holder == self.holder
        if await self._alive(holder):
            return True
        if holder not in self._known_dead:
            self._known_dead.add(holder)
            self._wake()
        return False

    async def _alive(self, holder: Holder) -> bool:
        now = self._clock()
        seen = self._seen.get(holder.lease)
        if seen is None or now - seen.read_at > FRESH_READ:
            try:
                lease = await self.kube.get(self._path(holder.lease))
            except Exception as exc:
                if is_not_found(exc):
                    self._seen.pop(holder.lease, None)
                    return False
                raise
            seen = self._record(lease, self._clock())
        if (seen.uid, seen.epoch) != (holder.uid, holder.epoch):
            return False  # re-created, or a new epoch after a fence: the claim is stale
        return now - seen.since < seen.duration

    def live_leases(self) -> list[str]:
        """Names of the Leases believed alive now (this one first): for preferring an owner."""
        now = self._clock()
        others = sorted(n for n, s in self._seen.items() if now - s.since < s.duration)
        return [self.name, *others]
