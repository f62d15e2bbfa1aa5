"""Slack's request signature (https://api.slack.com/authentication/verifying-requests-from-slack):
`X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:<X-Slack-Request-Timestamp>:<raw body>")>`;
requests older than five minutes are refused (replays)."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["slack_signature", "verify_slack", "MAX_AGE"]

MAX_AGE = 300


def slack_signature(secret: bytes, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()


def verify_slack(secret: bytes, timestamp: str | None, body: bytes, signature: str | None, *, now: float) -> str | None:
    """None when the request is Slack's and fresh; else why not."""
    if not timestamp or not signature:
        return "X-Slack-Request-Timestamp and X-Slack-Signature are required"
    try:
        stamp = int(timestamp)
    except ValueError:
        return "X-Slack-Request-Timestamp: not a number"
    if abs(now - stamp) > MAX_AGE:
        return "X-Slack-Request-Timestamp: more than 5 minutes away (a replay?)"
    if not hmac.compare_digest(slack_signature(secret, timestamp, body), signature):
        return "X-Slack-Signature: does not match the signing secret"
    return None
