"""An alert as every trigger hands it to the dispatcher."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["Alert", "fingerprint_of", "FINGERPRINT_PATTERN"]

FINGERPRINT_PATTERN = re.compile(r"^[0-9a-f]{1,63}$")
"""What a fingerprint may look like (Alertmanager's are 16 hex digits); it becomes a label
value, so anything else is replaced by our own hash of the labels."""


def fingerprint_of(labels: dict[str, str]) -> str:
    """A stable fingerprint of a label set (the same labels give the same value everywhere)."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Alert:
    """One alert: firing or resolved, with what the route's template may read."""

    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    status: str = "firing"
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    generator_url: str = ""
    given_fingerprint: str = ""
    source: str = "Alertmanager"
    """Which AlertRoute source it comes from: Alertmanager or KubernetesEvents."""
    subject: dict[str, object] | None = None
    """The Investigation's spec.subject when the source knows it better than the labels."""
    extra: dict[str, object] = field(default_factory=dict)
    """What else the source knows (receiver, external URL), kept in the Investigation's context."""

    @property
    def firing(self) -> bool:
        return self.status != "resolved"

    @property
    def fingerprint(self) -> str:
        given = self.given_fingerprint.lower()
        return given if FINGERPRINT_PATTERN.match(given) else fingerprint_of(self.labels)

    def as_context(self) -> dict[str, object]:
        """The alert as the Investigation's spec.context.alert keeps it."""
        context: dict[str, object] = {
            "status": self.status,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "fingerprint": self.fingerprint,
        }
        if self.starts_at is not None:
            context["startsAt"] = self.starts_at.isoformat()
        if self.generator_url:
            context["generatorURL"] = self.generator_url
        return context
