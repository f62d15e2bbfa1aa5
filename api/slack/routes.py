"""`POST /api/slack/interactions`: Slack's interactivity request URL.

Slack posts `payload=<json>` (form-encoded) when someone clicks a button of a message the
operator sent (`lestrade.operator.delivery.slack`). The request carries no Kubernetes token; it
is Slack's, which its signature proves (`signature.py`; signing secret from a Secret, path in
`LESTRADE_SLACK_SIGNING_SECRET_FILE`: unset, the endpoint answers 404). The clicking user is
mapped to a Kubernetes identity (`users.py`; unmapped: 403) and the decision is written *as
that identity* (impersonation), so RBAC and the decisions admission policy decide exactly as
for `kubectl patch` by that user. The button names the run (with its uid: a re-created run of
the same name is not decided) and the call with its digest (only that exact call runs). Then
the message is replaced through Slack's `response_url` with one saying who decided.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from lestrade.api.slack.signature import verify_slack
from lestrade.api.slack.users import identity_of, read_user_map
from lestrade.kube import ApiException, Kube, resource_path
from lestrade.resources.constants import CONVERSATION_PLURAL, INVESTIGATION_PLURAL

__all__ = ["router", "SlackSettings", "INTERACTIONS_PATH"]

logger = logging.getLogger(__name__)
router = APIRouter()
INTERACTIONS_PATH = "/api/slack/interactions"
APPROVE, DENY = "lestrade.approve", "lestrade.deny"
MAX_BODY = 256 * 1024
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class SlackSettings:
    signing_secret: bytes | None = None
    user_map: tuple[str, str] | None = None
    """(namespace, name) of the mapping ConfigMap; None: `<API namespace>/lestrade-slack-users`."""
    response_url_prefix: str = "https://hooks.slack.com/"
    """Messages are only ever updated at Slack's own address."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SlackSettings:
        path = env.get("LESTRADE_SLACK_SIGNING_SECRET_FILE")
        secret = Path(path).read_text().strip().encode() if path and Path(path).is_file() else None
        mapping = env.get("LESTRADE_SLACK_USER_MAP") or ""
        ns, _, name = mapping.partition("/")
        return cls(
            signing_secret=secret or None,
            user_map=(ns, name) if ns and name else None,
            response_url_prefix=env.get("LESTRADE_SLACK_RESPONSE_URL_PREFIX") or "https://hooks.slack.com/",
        )


def _refuse(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


@router.post(INTERACTIONS_PATH, include_in_schema=False)
async def interaction(request: Request) -> JSONResponse:
    settings: SlackSettings = request.app.state.slack
    if not settings.signing_secret:
        return _refuse(404, "Slack interactions are not configured (LESTRADE_SLACK_SIGNING_SECRET_FILE)")
    raw = await request.body()
    if len(raw) > MAX_BODY:
        return _refuse(413, "body too large")
    problem = verify_slack(
        settings.signing_secret,
        request.headers.get("x-slack-request-timestamp"),
        raw,
        request.headers.get("x-slack-signature"),
        now=time.time(),
    )
    if problem:
        return _refuse(401, problem)
    try:
        payload = json.loads((parse_qs(raw.decode())["payload"])[0])
        team = (payload.get("team") or {}).get("id")
        slack_user = payload["user"]["id"]
        action = payload["actions"][0]
        target = json.loads(action["value"])
        approved = {APPROVE: True, DENY: False}[action["action_id"]]
        plural = {"Investigation": INVESTIGATION_PLURAL, "Conversation": CONVERSATION_PLURAL}[target["kind"]]
        namespace, name, uid, call = target["namespace"], target["name"], target["uid"], target["call"]
        if not (_NAME.match(namespace) and _NAME.match(name) and isinstance(call, str)):
            raise ValueError("names")
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        return _refuse(400, "payload: not a Lestrade approval button's block_actions payload")

    kube: Kube = request.app.state.kube
    map_ns, map_name = settings.user_map or (request.app.state.namespace, "lestrade-slack-users")
    identity = identity_of(await read_user_map(kube, map_ns, map_name), team, slack_user)
    if identity is None:
        return _refuse(
            403, f"Slack user {slack_user} is not mapped to a Kubernetes identity (ConfigMap {map_ns}/{map_name})"
        )

    path = resource_path(plural, namespace, name)
    try:
        obj = await kube.get(path)
    except ApiException as exc:
        return _refuse(404 if exc.status == 404 else 502, f"{plural} {namespace}/{name}: {exc.reason}")
    if (obj.get("metadata") or {}).get("uid") != uid:
        return _refuse(409, f"{plural} {namespace}/{name} is not the run this message is about")
    decided = (obj.get("spec") or {}).get("decisions") or {}
    pending = {p["toolCallId"]: p for p in (obj.get("status") or {}).get("pendingApprovals") or []}
    if call not in pending or call in decided:
        return _refuse(409, f"call {call} is not waiting for a decision")
    digest = pending[call].get("digest")
    if target.get("digest") and digest and target["digest"] != digest:
        return _refuse(409, f"call {call} changed since the message was sent")
    decision = {
        k: v
        for k, v in {
            "approved": approved,
            "reason": f"{'approved' if approved else 'denied'} in Slack by {identity.user}",
            "digest": digest,
        }.items()
        if v is not None
    }
    try:
        await kube.acting_as(identity.user, identity.groups).patch(path, {"spec": {"decisions": {call: decision}}})
    except ApiException as exc:
        status = exc.status if exc.status in (403, 409, 422) else 502
        return _refuse(status, f"the decision as {identity.user} was refused: {exc.reason}: {(exc.body or '')[:300]}")
    await _update_message(settings, payload, identity.user, approved)
    return JSONResponse({"decided": {call: decision}, "by": identity.user})


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


async def _update_message(settings: SlackSettings, payload: dict[str, Any], user: str, approved: bool) -> None:
    """Replaces the message: its buttons go, a line says who decided (best effort)."""
    url = payload.get("response_url")
    if not isinstance(url, str) or not url.startswith(settings.response_url_prefix):
        return
    blocks = [
        b
        for b in (payload.get("message") or {}).get("blocks") or []
        if not (b.get("type") == "actions" and any(e.get("value") for e in b.get("elements") or []))
    ]
    word = "approved" if approved else "denied"
    note = {
        "type": "section",
        "text": {"type": "mrkdwn", "text": f":ballot_box_with_check: {word} by *{_escape(user)}*"},
    }
    blocks.insert(min(1, len(blocks)), note)
    body = {"replace_original": True, "text": f"{word} by {_escape(user)}", "blocks": blocks[:50]}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as client:
            async with client.post(url, json=body, allow_redirects=False) as response:
                await response.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        logger.info("could not update the Slack message: %s", exc)
