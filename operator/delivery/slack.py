"""A payload as a Slack message (Block Kit), within Slack's documented limits.

https://api.slack.com/reference/block-kit/blocks: at most 50 blocks; a header's plain_text at
most 150 characters; a section's text at most 3000 and its fields at most 10 of 2000 each; a
button's text at most 75, its value at most 2000, its url at most 3000, action_id at most 255
and unique in the message; a context at most 10 elements. Everything the run says (title,
analysis, tool descriptions: hostile text) goes in as text: in mrkdwn `&`, `<` and `>` are
escaped (https://api.slack.com/reference/surfaces/formatting#escaping), so it can neither
mention (`<!channel>`) nor make a link with a fake label (`<https://evil|docs>`).

A message for a run that waits carries Approve and Deny buttons per call; their `value` names
the run and the call (with its digest, so a decision applies only to that exact call). The API
receives Slack's interaction callback for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["slack_message", "escape", "APPROVE_ACTION", "DENY_ACTION", "MAX_BLOCKS"]

MAX_BLOCKS = 50
HEADER_CHARS = 150
SECTION_CHARS = 3000
FIELD_CHARS = 2000
BUTTON_TEXT_CHARS = 75
BUTTON_VALUE_CHARS = 2000
MAX_CALLS = 10
APPROVE_ACTION = "lestrade.approve"
DENY_ACTION = "lestrade.deny"

_PHASE_EMOJI = {
    "Succeeded": ":white_check_mark:",
    "Answered": ":white_check_mark:",
    "Failed": ":x:",
    "AwaitingApproval": ":raised_hand:",
}


def escape(text: str) -> str:
    """Slack's three control characters, as Slack documents them."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _mrkdwn(markdown: str) -> str:
    """Markdown's bold and headings in Slack's spelling (after escaping)."""
    text = escape(markdown)
    text = re.sub(r"\*\*(.+?)\*\*", r"*\1*", text)
    return re.sub(r"(?m)^#{1,6}\s+(.+)$", r"*\1*", text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, SECTION_CHARS)}}


def slack_message(payload: Mapping[str, Any]) -> dict[str, Any]:
    """`{text, blocks}` for chat.postMessage, chat.update or an incoming webhook."""
    run = payload["run"]
    phase = run.get("phase") or "Unknown"
    kind_name = f"{run['kind']} {run['namespace']}/{run['name']}"
    if run.get("turn") is not None:
        kind_name += f" (turn {run['turn'] + 1})"
    title = run.get("title") or kind_name
    usage = run.get("usage") or {}
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, HEADER_CHARS), "emoji": False}},
        {
            "type": "section",
            "fields": [
                {
                    "type": "mrkdwn",
                    "text": _cut(f"*Phase*\n{_PHASE_EMOJI.get(phase, '')} {escape(phase)}".strip(), FIELD_CHARS),
                },
                {
                    "type": "mrkdwn",
                    "text": f"*Cost*\n${float(usage.get('cost') or 0):.4f} ({int(usage.get('totalTokens') or 0)} tokens)",
                },
                {"type": "mrkdwn", "text": _cut(f"*Run*\n{escape(kind_name)}", FIELD_CHARS)},
                {"type": "mrkdwn", "text": _cut(f"*Model*\n{escape(run.get('model') or '-')}", FIELD_CHARS)},
            ],
        },
    ]
    if run.get("message") and phase == "Failed":
        blocks.append(_section(f"*Error*\n{escape(run['message'])}"))
    sections = run.get("sections") or {}
    reserve = 6 + 2 * min(len(payload.get("pendingApprovals") or []), MAX_CALLS)
    if sections:
        for name, text in sections.items():
            if len(blocks) >= MAX_BLOCKS - reserve:
                break
            blocks.append(_section(f"*{escape(name)}*\n{_mrkdwn(text or '-')}"))
    elif run.get("analysis"):
        blocks.append(_section(_mrkdwn(run["analysis"])))
    for call in (payload.get("pendingApprovals") or [])[:MAX_CALLS]:
        blocks.append(
            _section(f"*Waiting for approval:* `{escape(call['toolName'])}`\n{escape(call.get('description') or '')}")
        )
        value = json.dumps(
            {
                "kind": run["kind"],
                "namespace": run["namespace"],
                "name": run["name"],
                "uid": run["uid"],
                "call": call["toolCallId"],
                "digest": call.get("digest"),
            },
            separators=(",", ":"),
        )
        if len(value) > BUTTON_VALUE_CHARS:
            continue  # cannot happen with Kubernetes names and sha256 digests; never cut an id
        blocks.append(
            {
                "type": "actions",
                "block_id": _cut(f"lestrade-{call['toolCallId']}", 255),
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE_ACTION,
                        "style": "primary",
                        "value": value,
                        "text": {"type": "plain_text", "text": "Approve", "emoji": False},
                    },
                    {
                        "type": "button",
                        "action_id": DENY_ACTION,
                        "style": "danger",
                        "value": value,
                        "text": {"type": "plain_text", "text": "Deny", "emoji": False},
                    },
                ],
            }
        )
    if run.get("url"):
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "lestrade.open",
                        "url": _cut(run["url"], 3000),
                        "text": {"type": "plain_text", "text": "Open in the console", "emoji": False},
                    }
                ],
            }
        )
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": _cut(escape(f"Lestrade · {payload['event']} · {payload['id']}"), FIELD_CHARS),
                },
            ],
        }
    )
    fallback = f"{phase}: {title}"
    return {"text": _cut(escape(fallback), SECTION_CHARS), "blocks": blocks[:MAX_BLOCKS]}


def decided_message(payload: Mapping[str, Any], decided_by: str, approved: bool) -> dict[str, Any]:
    """The waiting message once someone decided: the buttons go, who decided is said."""
    message = slack_message({**payload, "pendingApprovals": []})
    word = "approved" if approved else "denied"
    message["blocks"].insert(1, _section(f":ballot_box_with_check: {word} by *{escape(decided_by)}*"))
    return message
