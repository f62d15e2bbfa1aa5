"""Answering a relay (`POST /chat/relay/:relayId`): a decision in the session's spec.decisions.

A relay *is* a pending approval of the session's Conversation, so the answer is written
exactly where `kubectl patch ... spec.decisions` writes it, as the caller, and the same
admission policy judges it. Whoever decides first wins: this write carries the
resourceVersion it read, so a decision that lands in between (kubectl, another API process)
makes it re-read and answer 409 naming the decision already made; a kubectl patch after this
one is refused by the admission policy ("already decided"). `always: true` (with an approval)
adds a rule allowing the tool (`spec.harness.permissions.allowlist`) in the same write.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from lestrade.api.base.follow import Follower, ResourceGone
from lestrade.api.harness.requests import HarnessError, RelayAnswer
from lestrade.kube import Acting, ApiException, Kube, is_conflict, resource_path
from lestrade.resources import CONVERSATION_PLURAL
from lestrade.runs.records import PendingCall
from lestrade.runs.transcript import RecordType, TranscriptState
from lestrade.runs.views import ConversationView

__all__ = ["resolve_relay", "SESSION_NOT_FOUND", "RELAY_NOT_FOUND", "STATUS_CATCH_UP_SECONDS"]

SESSION_NOT_FOUND = "Session not found"
RELAY_NOT_FOUND = "Relay not found"
STATUS_CATCH_UP_SECONDS = 30.0
"""How long a relay answer waits for status to list the relay (the operator stores the
transcript first; the admission policy accepts decisions only for calls status lists)."""


def _relay(state: TranscriptState, relay_id: str) -> PendingCall | None:
    for record in state.records:
        if record["t"] == RecordType.APPROVAL_NEEDED:
            for pending in record.get("pending") or []:
                if pending.get("toolCallId") == relay_id:
                    return pending
    return None


def _decided(obj: dict[str, Any], state: TranscriptState, relay_id: str) -> dict[str, Any] | None:
    made = ((obj.get("spec") or {}).get("decisions") or {}).get(relay_id)
    return made if isinstance(made, dict) else state.decisions.get(relay_id)


def _conflict(relay_id: str, decision: dict[str, Any]) -> HarnessError:
    word = "approved" if decision.get("approved") else "denied"
    why = f" ({decision['reason']})" if decision.get("reason") else ""
    return HarnessError(409, f"Relay {relay_id} was already decided: {word}{why}")


# A Kubernetes object name: anything else (a path, say) is no session of ours.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


async def resolve_relay(
    follower: Follower, writer: Kube | Acting, namespace: str, relay_id: str, answer: RelayAnswer
) -> None:
    if not _NAME.match(answer.session_id):
        raise HarnessError(404, SESSION_NOT_FOUND)
    obj = await follower.get(CONVERSATION_PLURAL, namespace, answer.session_id)
    if obj is None or not (obj.get("spec") or {}).get("harness"):
        raise HarnessError(404, SESSION_NOT_FOUND)
    try:
        async with asyncio.timeout(STATUS_CATCH_UP_SECONDS):
            async for snapshot in follower.snapshots((CONVERSATION_PLURAL, namespace, answer.session_id)):
                if await _try(snapshot.object, snapshot.transcript, writer, namespace, relay_id, answer):
                    return
    except ResourceGone:
        raise HarnessError(404, SESSION_NOT_FOUND) from None
    except TimeoutError:
        pass
    raise HarnessError(409, f"Relay {relay_id} is not waiting for a decision yet; try again")


async def _try(
    obj: dict[str, Any],
    state: TranscriptState,
    writer: Kube | Acting,
    namespace: str,
    relay_id: str,
    answer: RelayAnswer,
) -> bool:
    """True once written; False to wait for the next version of the object."""
    pending = _relay(state, relay_id)
    if pending is None:
        raise HarnessError(404, RELAY_NOT_FOUND)
    decided = _decided(obj, state, relay_id)
    if decided is not None:
        raise _conflict(relay_id, decided)
    view = ConversationView(obj)
    if relay_id not in view.pending_ids:
        if view.current_turn is None:  # the session's turn ended (failed, timed out) meanwhile
            raise HarnessError(409, f"Relay {relay_id} is no longer waiting: the session ended")
        return False  # status has not caught up with the transcript yet
    spec: dict[str, Any] = {
        "decisions": {
            relay_id: {
                "approved": answer.approved,
                **({"reason": answer.reason} if answer.reason else {}),
            }
        }
    }
    if answer.always and answer.approved:
        harness = dict((obj.get("spec") or {}).get("harness") or {})
        permissions = dict(harness.get("permissions") or {})
        rule = {"tool": str(pending.get("toolName") or "")}
        allowlist = list(permissions.get("allowlist") or [])
        if rule not in allowlist:
            # A merge patch replaces a list whole: the resourceVersion keeps this one current.
            spec["harness"] = {"permissions": {"allowlist": [*allowlist, rule]}}
    patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": spec}
    try:
        await writer.patch(resource_path(CONVERSATION_PLURAL, namespace, obj["metadata"]["name"]), patch)
    except ApiException as exc:
        if is_conflict(exc):
            return False  # changed meanwhile (maybe decided): the next version says
        message = _message(exc)
        if "already decided" in message:
            raise HarnessError(409, f"Relay {relay_id} was already decided: {message}") from None
        if exc.status in (400, 403, 404, 422):
            raise HarnessError(400 if exc.status == 422 else exc.status, message) from None
        raise
    return True


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except json.JSONDecodeError:
        return str(exc.reason)
