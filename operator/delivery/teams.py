"""A payload as a Microsoft Teams message: an Adaptive Card in a `message` activity, the shape
Teams' incoming webhooks (and Workflows webhooks) take.

https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using
(“Send Adaptive Cards using an Incoming Webhook”): `{"type": "message", "attachments": [{
"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": {card}}]}`,
the card `{"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type":
"AdaptiveCard", "version": "1.4", "body": [...], "actions": [...]}`; the message at most 28 KB.
TextBlock text is markdown: run text is made inert where it could form a link.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["teams_message", "MAX_BYTES", "CARD_VERSION"]

MAX_BYTES = 28 * 1024
CARD_VERSION = "1.4"
TEXT_CHARS = 6000


def _inert(text: str) -> str:
    """No markdown links or images from run text (`[label](url)` with a fake label)."""
    return text.replace("](", "]\u200b(").replace("<", "&lt;").replace(">", "&gt;")


def _text(text: str, **style: Any) -> dict[str, Any]:
    cut = text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"
    return {"type": "TextBlock", "text": cut, "wrap": True, **style}


def teams_message(payload: Mapping[str, Any]) -> dict[str, Any]:
    run = payload["run"]
    usage = run.get("usage") or {}
    name = f"{run['kind']} {run['namespace']}/{run['name']}"
    if run.get("turn") is not None:
        name += f" (turn {run['turn'] + 1})"
    body: list[dict[str, Any]] = [
        _text(_inert(run.get("title") or name), size="Medium", weight="Bolder"),
        {
            "type": "FactSet",
            "facts": [
                {"title": "Phase", "value": _inert(run.get("phase") or "Unknown")},
                {
                    "title": "Cost",
                    "value": f"${float(usage.get('cost') or 0):.4f} ({int(usage.get('totalTokens') or 0)} tokens)",
                },
                {"title": "Run", "value": _inert(name)},
                {"title": "Model", "value": _inert(run.get("model") or "-")},
            ],
        },
    ]
    if run.get("phase") == "Failed" and run.get("message"):
        body.append(_text(_inert(run["message"]), color="Attention"))
    for title, text in (run.get("sections") or {}).items():
        body.append(_text(_inert(title), weight="Bolder", separator=True))
        body.append(_text(_inert(text or "-")))
    if not run.get("sections") and run.get("analysis"):
        body.append(_text(_inert(run["analysis"]), separator=True))
    for call in payload.get("pendingApprovals") or []:
        body.append(
            _text(
                _inert(f"Waiting for approval: {call['toolName']} — {call.get('description') or ''}"),
                weight="Bolder",
                separator=True,
            )
        )
    actions = []
    if run.get("url"):
        actions.append({"type": "Action.OpenUrl", "title": "Open in the console", "url": run["url"]})
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": CARD_VERSION,
        "body": body,
        "actions": actions,
        "msteams": {"width": "Full"},
    }
    message = {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card,
            }
        ],
    }
    # Teams refuses messages over 28 KB: drop the longest text blocks' tails until it fits.
    while len(json.dumps(message).encode()) > MAX_BYTES:
        longest = max((b for b in body if b["type"] == "TextBlock"), key=lambda b: len(b["text"]))
        if len(longest["text"]) < 200:
            break
        longest["text"] = longest["text"][: len(longest["text"]) // 2] + "…"
    return message
