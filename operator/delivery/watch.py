"""Sends what runs owe their destinations, each message once, recorded in the run's status.

A watch of its own (like the TTL reaper's) asks the apiserver only for runs whose
`status.delivery` is `Pending` (a selectable field; the run's status writer sets it with every
milestone of a run that names destinations), so finished runs with nothing left to send cost
nothing. For each such run one task at a time (per process) compares what is due
(`due.py`) with `status.deliveries` and works through it:

1. *claim*: the record of the attempt (state `Sending`, attempts + 1, the time) is written with
   the resourceVersion read as a precondition — of two replicas, or of a process and its
   restarted self, exactly one attempt wins; the loser re-reads;
2. *send* (`send.py`), with the message id as idempotency key (`X-Lestrade-Delivery`);
3. *record* the outcome: `Sent`, `Retrying` (with the next attempt's time: backoff doubling from
   the Destination's `retry.backoffSeconds`) or `Failed` (attempts used up, or refused for good).

So a kill -9 between a run's end and its send leaves the message due and unrecorded (or
`Retrying`), and the restarted operator sends it once. A kill -9 *during* a send leaves a
`Sending` record; once it is older than three attempt timeouts it is tried again with the same
id — the one case where a receiver can get a message twice, recognisable by the id (the gap
between a request arriving and its record being written cannot be closed without the
receiver's help). When nothing is due any more and the run is settled, `status.delivery`
becomes `Done` (with the same precondition, so a new turn that reopened it wins). Sending never
blocks or fails a run: it happens here, outside the run's pipeline, after the run's own writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lestrade.decision_links import DecisionLink, make_token
from lestrade.kube import ApiException, Kube, is_conflict, is_not_found, resource_path
from lestrade.operator.delivery.due import Due, due_messages, run_finished
from lestrade.operator.delivery.payload import build_payload
from lestrade.operator.delivery.send import Outcome, Sender
from lestrade.resources.constants import CONVERSATION_PLURAL, DESTINATION_PLURAL, INVESTIGATION_PLURAL
from lestrade.resources.destination import DELIVERY_DONE, DELIVERY_PENDING, DeliveryState
from lestrade.timefmt import now_iso, parse_time

__all__ = ["DeliveryWatch", "SELECTOR", "backoff"]

logger = logging.getLogger(__name__)

SELECTOR = f"status.delivery={DELIVERY_PENDING}"
LIST_CHUNK = 500
RETRY_DELAY = 2.0
MAX_BACKOFF = 600.0
KEEP_SETTLED = 32
"""Settled records kept besides the ones still due (a long Conversation's list stays small)."""


class _Gone(Exception):
    """The run was deleted."""


def backoff(base: float, attempts: int) -> float:
    return min(MAX_BACKOFF, base * 2 ** max(0, attempts - 1))


def _time(value: Any) -> float:
    parsed = parse_time(value) if value else None
    return parsed.timestamp() if parsed else 0.0


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rv(obj: Mapping[str, Any]) -> int:
    return int((obj.get("metadata") or {}).get("resourceVersion") or 0)


class DeliveryWatch:
    def __init__(
        self,
        kube: Kube,
        *,
        timeout: float = 10.0,
        console_url: str | None = None,
        api_url: str | None = None,
        decision_key: bytes | None = None,
        link_lifetime: float = 86400.0,
    ) -> None:
        self.kube = kube
        self.api_url = api_url
        self.decision_key = decision_key
        self.link_lifetime = link_lifetime
        self.sender = Sender(kube, timeout=timeout, console_url=console_url)
        self.abandon_after = 3 * timeout
        self._latest: dict[str, dict[str, Any]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    # -- following the runs ---------------------------------------------------------------------

    async def follow(self, namespaces: Sequence[str] = ()) -> None:
        """Until cancelled: one list-then-watch per kind and namespace."""
        paths = [
            resource_path(plural, ns or None)
            for plural in (INVESTIGATION_PLURAL, CONVERSATION_PLURAL)
            for ns in (namespaces or [""])
        ]
        watches = [asyncio.create_task(self._follow(p), name=f"delivery watch {p}") for p in paths]
        try:
            await asyncio.gather(*watches)
        finally:
            for task in [*watches, *self._tasks.values()]:
                task.cancel()
            await asyncio.gather(*watches, *self._tasks.values(), return_exceptions=True)
            await self.sender.aclose()

    async def _follow(self, path: str) -> None:
        selector = SELECTOR
        while True:
            try:
                version = await self._list(path, selector)
                await self._watch(path, selector, version)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 400:
                    # A CRD older than this operator: no status.delivery to select by, and no
                    # spec.deliver either (the apiserver prunes it), so nothing to send. Not a
                    # watch of every run instead; apply the new CRDs and restart.
                    logger.warning(
                        "no delivery for %s: its CRD cannot select status.delivery (apply this version's CRDs): %s",
                        path,
                        exc.reason,
                    )
                    return
                logger.warning("delivery watch of %s failed, listing again: %s", path, exc)
                await asyncio.sleep(RETRY_DELAY)
            except Exception as exc:
                logger.warning("delivery watch of %s failed, listing again: %s", path, exc)
                await asyncio.sleep(RETRY_DELAY)

    async def _list(self, path: str, selector: str) -> str:
        query: dict[str, Any] = {"limit": LIST_CHUNK, **({"fieldSelector": selector} if selector else {})}
        while True:
            page = await self.kube.get(path, **query)
            kind = page.get("kind", "").removesuffix("List")
            for item in page.get("items") or []:
                self.consider({"kind": kind, **item})
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return str(meta.get("resourceVersion", ""))
            query["continue"] = meta["continue"]

    async def _watch(self, path: str, selector: str, version: str) -> None:
        while True:
            selection = {"fieldSelector": selector} if selector else {}
            async for event in self.kube.watch(path, resource_version=version, **selection):  # type: ignore[arg-type]
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if kind in ("ADDED", "MODIFIED"):
                    self.consider(obj)

    def consider(self, obj: dict[str, Any]) -> None:
        """A run whose deliveries may be open: its task (started if none) looks at it."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid or (obj.get("status") or {}).get("delivery") != DELIVERY_PENDING:
            return
        known = self._latest.get(uid)
        if known is None or _rv(obj) >= _rv(known):
            self._latest[uid] = obj
        self._wake.setdefault(uid, asyncio.Event()).set()
        task = self._tasks.get(uid)
        if task is None or task.done():
            self._tasks[uid] = asyncio.create_task(self._run(uid), name=f"delivery {meta.get('name')}")

    # -- one run ------------------------------------------------------------------------------------

    async def _run(self, uid: str) -> None:
        try:
            await self._deliver(uid)
        except asyncio.CancelledError:
            raise
        except _Gone:
            pass
        except Exception:
            logger.exception("delivery for %s failed; it is looked at again on its next change", uid)
        finally:
            self._tasks.pop(uid, None)
            self._latest.pop(uid, None)
            self._wake.pop(uid, None)

    def _learn(self, uid: str, obj: Mapping[str, Any] | None) -> None:
        if obj is not None and _rv(obj) >= _rv(self._latest.get(uid) or {}):
            self._latest[uid] = dict(obj)

    async def _deliver(self, uid: str) -> None:
        wake = self._wake[uid]
        while True:
            wake.clear()
            obj = self._latest[uid]
            status = obj.get("status") or {}
            if status.get("delivery") != DELIVERY_PENDING:
                return
            due = due_messages(obj)
            records = {r.get("id"): r for r in status.get("deliveries") or []}
            now = time.time()
            chosen: tuple[Due, dict[str, Any] | None] | None = None
            next_at: float | None = None
            for message in due:
                record = records.get(message.id)
                if record is None:
                    chosen = (message, None)
                    break
                state = record.get("state")
                if state in (DeliveryState.SENT, DeliveryState.FAILED):
                    continue
                if state == DeliveryState.RETRYING:
                    ready = _time(record.get("nextAttemptTime"))
                else:  # Sending: someone's attempt under way, or abandoned by a dead process
                    ready = _time(record.get("lastAttemptTime")) + self.abandon_after
                if ready <= now:
                    chosen = (message, record)
                    break
                next_at = ready if next_at is None else min(next_at, ready)
            if chosen is not None:
                await self._attempt(uid, obj, *chosen)
                continue
            if next_at is not None:
                try:
                    await asyncio.wait_for(wake.wait(), max(0.0, next_at - now))
                except TimeoutError:
                    pass
                continue
            if run_finished(obj):
                await self._settle(uid, obj)
            return

    def _path(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        plural = CONVERSATION_PLURAL if obj.get("kind") == "Conversation" else INVESTIGATION_PLURAL
        return resource_path(plural, meta.get("namespace"), meta.get("name", ""))

    async def _write(self, uid: str, obj: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        """A status patch that holds only if nothing changed since `obj`: None on a conflict
        (the object is read again and the caller's loop decides anew)."""
        body = {"metadata": {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion")}, "status": status}
        try:
            written = await self.kube.patch(self._path(obj) + "/status", body)
        except ApiException as exc:
            if is_conflict(exc):
                self._learn(uid, {"kind": obj.get("kind"), **await self.kube.get(self._path(obj))})
                return None
            if is_not_found(exc):
                raise _Gone from None  # the run is gone: nothing to tell
            raise
        written = {"kind": obj.get("kind"), **written}
        self._learn(uid, written)
        return written

    @staticmethod
    def _records(obj: Mapping[str, Any], record: dict[str, Any], due: Sequence[Due]) -> list[dict[str, Any]]:
        others = [r for r in (obj.get("status") or {}).get("deliveries") or [] if r.get("id") != record["id"]]
        open_ids = {d.id for d in due}
        settled = [
            r
            for r in others
            if r.get("id") not in open_ids and r.get("state") in (DeliveryState.SENT, DeliveryState.FAILED)
        ]
        drop = {id(r) for r in settled[: max(0, len(settled) - KEEP_SETTLED)]}
        return [r for r in others if id(r) not in drop] + [record]

    async def _attempt(self, uid: str, obj: Mapping[str, Any], due: Due, record: dict[str, Any] | None) -> None:
        all_due = due_messages(obj)
        attempts = int((record or {}).get("attempts") or 0) + 1
        claim = {
            **(record or {}),
            "id": due.id,
            "destination": due.destination,
            "event": due.event,
            "state": DeliveryState.SENDING.value,
            "attempts": attempts,
            "lastAttemptTime": now_iso(),
            "nextAttemptTime": None,
        }
        claim = {k: v for k, v in claim.items() if v is not None}
        claimed = await self._write(uid, obj, {"deliveries": self._records(obj, claim, all_due)})
        if claimed is None:
            return  # someone else wrote first: look again
        # Earlier pause messages to this destination that this end closes (firing -> resolved).
        pauses = f"{due.event}-approval-" if due.turn is not None else "approval-"
        earlier = [
            r
            for r in (obj.get("status") or {}).get("deliveries") or []
            if due.status == "resolved"
            and r.get("destination") == due.destination
            and r.get("state") == DeliveryState.SENT
            and (r.get("event") or "").startswith(pauses)
        ]
        payload = build_payload(claimed, due, resolves=[r["id"] for r in earlier])
        if due.status == "firing" and self.api_url and self.decision_key and payload["pendingApprovals"]:
            payload["decisionUrl"] = self._decision_url(claimed, payload)
        meta = claimed.get("metadata") or {}
        update_ref = next((r.get("ref") for r in reversed(earlier) if r.get("ref")), None)
        outcome = await self.sender.send(meta.get("namespace", ""), due.destination, payload, update_ref=update_ref)
        await self._record(uid, claimed, claim, outcome)
        await self._tell_destination(meta.get("namespace", ""), due.destination, meta, obj.get("kind"), outcome)

    def _decision_url(self, obj: Mapping[str, Any], payload: Mapping[str, Any]) -> str:
        """A signed link deciding exactly the waiting calls of this run (`decision_links`)."""
        assert self.api_url and self.decision_key
        meta = obj.get("metadata") or {}
        link = DecisionLink(
            kind=str(obj.get("kind") or "Investigation"),
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            calls=tuple((p["toolCallId"], p.get("digest")) for p in payload["pendingApprovals"]),
            expires=int(time.time() + self.link_lifetime),
        )
        return f"{self.api_url.rstrip('/')}/api/delivery/decisions/{make_token(self.decision_key, link)}"

    async def _record(self, uid: str, obj: Mapping[str, Any], claim: dict[str, Any], outcome: Outcome) -> None:
        attempts = int(claim["attempts"])
        record = {k: v for k, v in claim.items() if k not in ("lastError", "nextAttemptTime")}
        if outcome.ok:
            record.update(state=DeliveryState.SENT.value, sentTime=now_iso())
            if outcome.ref:
                record["ref"] = outcome.ref[:256]
        elif outcome.retry and attempts < outcome.policy.max_attempts:
            at = time.time() + backoff(outcome.policy.backoff_seconds, attempts)
            record.update(state=DeliveryState.RETRYING.value, nextAttemptTime=_iso(at), lastError=outcome.error)
        else:
            record.update(state=DeliveryState.FAILED.value, lastError=outcome.error)
        if not outcome.ok:
            logger.info("delivery %s: attempt %d failed: %s", claim["id"], attempts, outcome.error)
        while True:  # the record is ours (we hold its claim): re-apply it on a conflict
            current = self._latest[uid] if _rv(self._latest[uid]) >= _rv(obj) else obj
            mine = next(
                (r for r in (current.get("status") or {}).get("deliveries") or [] if r.get("id") == claim["id"]), None
            )
            if mine is not None and (mine.get("attempts") != attempts or mine.get("state") != DeliveryState.SENDING):
                return  # taken over by another process after our claim went stale
            written = await self._write(
                uid, current, {"deliveries": self._records(current, record, due_messages(current))}
            )
            if written is not None:
                return
            obj = self._latest[uid]

    async def _settle(self, uid: str, obj: Mapping[str, Any]) -> None:
        await self._write(uid, obj, {"delivery": DELIVERY_DONE})

    async def _tell_destination(
        self,
        namespace: str,
        name: str,
        run: Mapping[str, Any],
        kind: Any,
        outcome: Outcome,
    ) -> None:
        """The Destination's status shows its latest send (best effort: never retried)."""
        status = {
            "lastDeliveryTime": now_iso(),
            "lastRun": f"{kind}/{run.get('name')}",
            "lastState": "Sent" if outcome.ok else ("Retrying" if outcome.retry else "Failed"),
            "lastError": outcome.error[:4096] if outcome.error else None,
        }
        try:
            await self.kube.patch(resource_path(DESTINATION_PLURAL, namespace, name) + "/status", {"status": status})
        except Exception as exc:
            logger.debug("could not update Destination %s/%s status: %s", namespace, name, exc)
