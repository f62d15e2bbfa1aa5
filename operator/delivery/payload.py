"""The generic webhook's payload, version 1: the one description of a message that the Slack
and Teams formats are rendered from too.

Its JSON Schema is published in the repository (`docs/schemas/delivery-v1.json`); a test
validates every payload the operator sends against it. Compatible additions keep the version;
anything else is `lestrade.dev/delivery/v2`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from lestrade.operator.delivery.due import Due
from lestrade.timefmt import now_iso

__all__ = ["PAYLOAD_VERSION", "build_payload", "run_url", "MAX_TEXT"]

PAYLOAD_VERSION = "lestrade.dev/delivery/v1"
MAX_TEXT = 64 * 1024
MAX_APPROVALS = 20


def run_url(console_url: str | None, plural: str, namespace: str, name: str) -> str | None:
    """The run's page in the web console (its hash route), or None without a console URL."""
    if not console_url:
        return None
    parts = "/".join(quote(p, safe="") for p in (plural, namespace, name))
    return f"{console_url.rstrip('/')}/#/run/{parts}"


def _cap(text: str | None, limit: int = MAX_TEXT) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + "…"


def _reason(status: Mapping[str, Any]) -> str | None:
    for item in status.get("conditions") or []:
        if item.get("type") in ("Succeeded", "Answered"):
            return item.get("reason")
    return None


def build_payload(
    body: Mapping[str, Any],
    due: Due,
    *,
    console_url: str | None = None,
    resolves: Sequence[str] = (),
) -> dict[str, Any]:
    """The message `due` as payload v1. `resolves`: ids of earlier pause messages to the same
    destination that this end closes (Alertmanager's firing → resolved)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    kind = body.get("kind") or "Investigation"
    plural = "conversations" if kind == "Conversation" else "investigations"
    uid = meta.get("uid", "")
    if due.turn is not None:
        turn = (status.get("turns") or [])[due.turn]
        title = (spec.get("turns") or [{}])[due.turn].get("ask") or turn.get("ask") or ""
        phase, analysis, sections = turn.get("phase"), turn.get("answer"), None
        message, usage = turn.get("message"), turn.get("usage") or {}
        start, completion = turn.get("startTime"), turn.get("completionTime")
        group = f"{uid}/turn-{due.turn}"
    else:
        title = spec.get("title") or ""
        phase, analysis, sections = status.get("phase"), status.get("analysis"), status.get("sections")
        message, usage = status.get("message"), status.get("usage") or {}
        start, completion = status.get("startTime"), status.get("completionTime")
        group = uid
    waiting = status.get("pendingApprovals") or [] if due.status == "firing" else []
    run: dict[str, Any] = {
        "kind": kind,
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": uid,
        "turn": due.turn,
        "title": _cap(title, 1024),
        "phase": phase,
        "reason": _reason(status),
        "message": _cap(message, 4096),
        "analysis": _cap(analysis) if due.status == "resolved" else None,
        "sections": {k: _cap(v) for k, v in sections.items()} if sections and due.status == "resolved" else None,
        "usage": {
            "promptTokens": int(usage.get("promptTokens") or 0),
            "completionTokens": int(usage.get("completionTokens") or 0),
            "totalTokens": int(usage.get("totalTokens") or 0),
            "cost": float(usage.get("cost") or 0.0),
        },
        "model": status.get("model"),
        "startTime": start,
        "completionTime": completion if due.status == "resolved" else None,
        "url": run_url(console_url, plural, meta.get("namespace", ""), meta.get("name", "")),
    }
    return {
        "version": PAYLOAD_VERSION,
        "id": due.id,
        "event": "run.awaitingApproval" if due.status == "firing" else "run.finished",
        "status": due.status,
        "groupKey": group,
        "resolves": list(resolves),
        "sentAt": now_iso(),
        "destination": due.destination,
        "run": run,
        "pendingApprovals": [
            {
                "toolCallId": p.get("toolCallId", ""),
                "toolName": p.get("toolName", ""),
                "description": _cap(p.get("description") or "", 2000),
                "digest": p.get("digest"),
            }
            for p in waiting[:MAX_APPROVALS]
        ],
    }
