"""HMAC-SHA256 signatures of webhook requests, in the style of Slack's and Stripe's: the
signature covers the timestamp and the exact body, so a receiver can refuse replays older than
a few minutes and any changed byte.

    X-Lestrade-Timestamp: 1764160000
    X-Lestrade-Signature: v1=<hex HMAC-SHA256(key, "1764160000." + body)>
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "sign", "verify"]

SIGNATURE_HEADER = "X-Lestrade-Signature"
TIMESTAMP_HEADER = "X-Lestrade-Timestamp"


def sign(key: bytes, timestamp: int, body: bytes) -> str:
    mac = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"v1={mac}"


def verify(key: bytes, timestamp: str, body: bytes, signature: str, *, now: float, tolerance: float = 300) -> bool:
    """What a receiver does (the tests do it too): right signature, timestamp recent."""
    try:
        stamp = int(timestamp)
    except ValueError:
        return False
    if abs(now - stamp) > tolerance:
        return False
    return hmac.compare_digest(sign(key, stamp, body), signature)
