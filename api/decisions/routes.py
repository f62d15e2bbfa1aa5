"""`POST /api/delivery/decisions/{token}`: a webhook receiver approves or denies the calls a
run waits for, through the signed link the operator put into the `run.awaitingApproval` message
(`decisionUrl`; `lestrade.decision_links`).

Body: `{"approved": true|false, "reason": "...", "by": "..."}` — for every call the link names.
The link is the credential (no token; the path is public to the auth middleware): it must be
signed with the shared key (`LESTRADE_DECISION_KEY_FILE`; unset: 404), unexpired, for the run
with that uid, and every call must still wait with the digest the link carries. The decision is
written by the API's own identity (the link's holder has no Kubernetes identity), bound to the
call digests, with a reason saying it came through the link (`by` is the receiver's claim,
quoted as such). POST only: a GET (a link preview, a crawler) decides nothing.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lestrade.decision_links import InvalidLink, read_token
from lestrade.kube import ApiException, Kube, resource_path
from lestrade.resources.constants import CONVERSATION_PLURAL, INVESTIGATION_PLURAL

__all__ = ["router", "DECISIONS_PREFIX"]

router = APIRouter()
DECISIONS_PREFIX = "/api/delivery/decisions/"


class DecisionBody(BaseModel):
    approved: bool
    reason: str | None = Field(default=None, max_length=1024)
    by: str | None = Field(default=None, max_length=256, description="who decided, as the receiver says")


def _refuse(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


@router.post(DECISIONS_PREFIX + "{token}", include_in_schema=False)
async def decide(token: str, body: DecisionBody, request: Request) -> JSONResponse:
    key: bytes | None = request.app.state.decision_key
    if not key:
        return _refuse(404, "decision links are not configured (LESTRADE_DECISION_KEY_FILE)")
    try:
        link = read_token(key, token, now=time.time())
    except InvalidLink as exc:
        return _refuse(403, f"token: {exc}")
    plural = {"Investigation": INVESTIGATION_PLURAL, "Conversation": CONVERSATION_PLURAL}.get(link.kind)
    if plural is None:
        return _refuse(403, "token: not a decision token")
    kube: Kube = request.app.state.kube
    path = resource_path(plural, link.namespace, link.name)
    try:
        obj = await kube.get(path)
    except ApiException as exc:
        return _refuse(404 if exc.status == 404 else 502, f"{plural} {link.namespace}/{link.name}: {exc.reason}")
    if (obj.get("metadata") or {}).get("uid") != link.uid:
        return _refuse(409, f"{plural} {link.namespace}/{link.name} is not the run this link is about")
    decided = (obj.get("spec") or {}).get("decisions") or {}
    pending = {p["toolCallId"]: p for p in (obj.get("status") or {}).get("pendingApprovals") or []}
    for call, digest in link.calls:
        if call not in pending or call in decided:
            return _refuse(409, f"call {call} is not waiting for a decision")
        if digest and pending[call].get("digest") != digest:
            return _refuse(409, f"call {call} changed since the link was made")
    word = "approved" if body.approved else "denied"
    note = f"{word} through a signed decision link" + (f" (by {body.by!r}, as the receiver says)" if body.by else "")
    if body.reason:
        note += f": {body.reason}"
    decisions: dict[str, Any] = {
        call: {
            k: v
            for k, v in {"approved": body.approved, "reason": note[:1024], "digest": digest}.items()
            if v is not None
        }
        for call, digest in link.calls
    }
    try:
        await kube.patch(path, {"spec": {"decisions": decisions}})
    except ApiException as exc:
        return _refuse(409 if exc.status in (409, 422) else 502, f"the decision was refused: {exc.reason}")
    return JSONResponse({"decided": decisions})
