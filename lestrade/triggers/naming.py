"""Deterministic names: the same alert, route and dedup window give the same Investigation
name in every API replica, so the apiserver's create conflict (409) is the deduplication —
a redelivered webhook or a second replica cannot create a duplicate."""

from __future__ import annotations

import hashlib
import math
from datetime import datetime

from lestrade.resources.keys import (
    ALERT_FINGERPRINT_LABEL,
    ALERT_RESOLVED_ANNOTATION,
    ALERT_ROUTE_LABEL,
    ALERT_STARTS_AT_ANNOTATION,
)
from lestrade.triggers.alerts import Alert

__all__ = [
    "ALERT_ROUTE_LABEL",
    "ALERT_FINGERPRINT_LABEL",
    "ALERT_STARTS_AT_ANNOTATION",
    "ALERT_RESOLVED_ANNOTATION",
    "CREATED_BY",
    "window_index",
    "investigation_name",
]

CREATED_BY = "lestrade-alertmanager"


def window_index(alert: Alert, window_seconds: float, now: datetime) -> int:
    """Which dedup window of the alert `now` falls in, counted from the alert's start (so a
    continuously firing alert gets a fresh Investigation once per window, and all replicas
    agree on the window whatever their clocks say within it). Alerts without a start count
    windows from the epoch."""
    anchor = alert.starts_at.timestamp() if alert.starts_at is not None else 0.0
    elapsed = max(0.0, now.timestamp() - anchor)
    return int(math.floor(elapsed / max(window_seconds, 1.0)))


def investigation_name(route: str, alert: Alert, window: int) -> str:
    """`<route>-<16 hex>`: at most 80 characters (route names are at most 63)."""
    start = alert.starts_at.isoformat() if alert.starts_at is not None else ""
    key = "\x00".join((route, alert.fingerprint, start, str(window)))
    return f"{route}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
