"""Kubernetes timestamps (metav1.Time): what the operator writes and everyone reads."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["now_iso", "to_iso", "parse_time"]


def to_iso(moment: datetime) -> str:
    """A time as metav1.Time serializes it (seconds, UTC, `Z`)."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def now_iso() -> str:
    """The current time as metav1.Time serializes it."""
    return to_iso(datetime.now(UTC))


def parse_time(value: str | None) -> datetime | None:
    """A metav1.Time string (as in status.startTime), or None when unset."""
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
