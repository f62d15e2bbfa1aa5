"""What the status of every run says, Investigation or Conversation: `RunStatus`.

Both kinds are runs of the same engine, so the parts of their status that describe a run — the
approvals it waits for, who asked, what it may read, where its transcript is, what was delivered
— are one model, and each kind adds its own (phase, analysis, turns, ...).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from lestrade.resources.common import PRESERVE_UNKNOWN, PendingApproval, TranscriptRef, WireModel
from lestrade.resources.destination import DeliveryRecord
from lestrade.resources.tenancy import Requester, RunScope

__all__ = ["RunStatus"]


class RunStatus(WireModel):
    """The status fields every run has. Written only by the operator."""

    pending_approvals: list[PendingApproval] = Field(
        default_factory=list,
        description="Tool calls waiting for a decision in spec.decisions.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["toolCallId"],
        },
    )
    message: str | None = Field(default=None, description="Human-readable summary of the current state or the error.")
    transcript: TranscriptRef | None = Field(
        default=None, description="Where the full conversation with the model is kept."
    )
    requester: Requester | None = Field(
        default=None,
        description="Who created this resource, as recorded at admission (see README: who sees what).",
    )
    scope: RunScope | None = Field(default=None, description="What the tools of the latest run may read, and why.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this status reflects."
    )
    writer: str | None = Field(
        default=None,
        max_length=256,
        description="The run attempt that writes this status (replica and attempt): a fencing token. "
        "Each write is conditional on the object's resourceVersion; after a conflict it is retried "
        "only while this is still the writer's own, so a replica that lost the run cannot write "
        "status after another took it over.",
    )
    delivery: str | None = Field(
        default=None,
        max_length=16,
        description="Pending while spec.deliver has messages to send, Done once every one is "
        "Sent or Failed (see deliveries).",
    )
    deliveries: list[DeliveryRecord] = Field(
        default_factory=list,
        max_length=256,
        description="Each message to a destination of spec.deliver: state, attempts, last error.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]},
    )
    kopf: dict[str, Any] | None = Field(
        default=None,
        description="Operator bookkeeping (handler progress); not meant for people.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
