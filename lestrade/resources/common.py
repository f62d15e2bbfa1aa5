"""Building blocks shared by both resources: wire conventions, conditions, approvals, usage.

Both Investigation and Conversation pause for the same approvals, report the same usage and
keep their transcripts the same way, so the operator and the API can share code for those
parts only if the shapes are literally the same classes.

Every field carries a `description`: the CRD generator copies it into the schema, where
`kubectl explain` shows it to the person running the cluster.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "WireModel",
    "Phase",
    "FINISHED_PHASES",
    "Condition",
    "ConditionStatus",
    "condition",
    "set_condition",
    "find_condition",
    "Decision",
    "Usage",
    "ToolCall",
    "PendingApproval",
    "TranscriptRef",
    "DURATION_PATTERN",
    "parse_duration",
    "PRESERVE_UNKNOWN",
    "cel_rule",
]

# A free-form object: the apiserver keeps whatever the user wrote.
PRESERVE_UNKNOWN: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}

# A Go-style duration restricted to the units people write for timeouts: `90s`, `10m`, `1h30m`.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration string such as `10m` or `1h30m` (the format of `spec.timeout`)."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"not a duration like 90s, 10m or 1h30m: {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def cel_rule(rule: str, message: str | None = None, **extra: Any) -> dict[str, Any]:
    """One `x-kubernetes-validations` entry (extra: messageExpression, reason, fieldPath...)."""
    entry: dict[str, Any] = {"rule": rule}
    if message is not None:
        entry["message"] = message
    entry.update(extra)
    return entry


class WireModel(BaseModel):
    """Base for resource parts: camelCase on the wire, snake_case in Python.

    Unknown fields are ignored when reading so an older operator can still read objects written
    by a newer API (the apiserver, not this model, is the gatekeeper of what gets stored).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="ignore",
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict to send to the apiserver (camelCase, unset optionals omitted)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Phase(StrEnum):
    """The one phase vocabulary of runs: an Investigation uses all but Answered, a
    Conversation (and each of its turns) all but Succeeded."""

    PENDING = "Pending"
    RUNNING = "Running"
    AWAITING_APPROVAL = "AwaitingApproval"
    SUCCEEDED = "Succeeded"
    ANSWERED = "Answered"
    FAILED = "Failed"


FINISHED_PHASES: frozenset[str] = frozenset({Phase.SUCCEEDED, Phase.ANSWERED, Phase.FAILED})
"""Phases after which a run (or a turn) does nothing more."""

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(WireModel):
    """One aspect of the resource's state, in the standard Kubernetes condition shape."""

    type: str = Field(
        min_length=1,
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Type of condition in CamelCase, e.g. Succeeded or AwaitingApproval.",
    )
    status: ConditionStatus = Field(
        description="Whether the condition holds: True, False, or Unknown (still undecided)."
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The .metadata.generation the condition was set for; if it is lower than "
        "the current generation, the condition is out of date.",
    )
    last_transition_time: datetime = Field(description="When the condition last changed from one status to another.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Machine-readable CamelCase word for the last transition, "
        "e.g. Running, Completed, StepLimit, ModelError.",
    )
    message: str = Field(
        max_length=32768,
        description="Human-readable details about the last transition; may be empty.",
    )


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def condition(
    type: str,  # noqa: A002 - the Kubernetes field is called `type`
    status: ConditionStatus | bool,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
    now: datetime | None = None,
) -> Condition:
    """A condition stamped with the current time (seconds precision, as metav1.Time stores it).

    `status` may be a bool for convenience: True/False map to "True"/"False".
    """
    if isinstance(status, bool):
        status = "True" if status else "False"
    return Condition(
        type=type,
        status=status,
        reason=reason,
        message=message,
        observed_generation=observed_generation,
        last_transition_time=now or _now(),
    )


def find_condition(conditions: list[Condition], type: str) -> Condition | None:  # noqa: A002
    """The condition of that type, if present."""
    return next((c for c in conditions if c.type == type), None)


def set_condition(conditions: list[Condition], new: Condition) -> list[Condition]:
    """A copy of `conditions` with `new` in place of the one of the same type.

    Keeps the old lastTransitionTime when the status did not change, as Kubernetes
    conventions require (the time records transitions, not updates).
    """
    result: list[Condition] = []
    replaced = False
    for old in conditions:
        if old.type != new.type:
            result.append(old)
            continue
        replaced = True
        if old.status == new.status:
            new = new.model_copy(update={"last_transition_time": old.last_transition_time})
        result.append(new)
    if not replaced:
        result.append(new)
    return result


class Decision(WireModel):
    """A person's decision on one tool call that waited for approval."""

    # `approved` is required by the schema itself: the apiserver answers
    # "spec.decisions.ID.approved: Required value". A CEL rule saying the same would never run,
    # because the apiserver skips CEL rules on objects that already failed schema validation.
    approved: bool = Field(
        description="true runs the tool call as the model asked; false refuses it and the "
        "model is told it was refused (with the reason, if given)."
    )
    reason: str | None = Field(
        default=None,
        max_length=4096,
        description="Why; shown to the model, most useful with a refusal "
        "(e.g. 'do not restart production pods, look at the logs instead').",
    )
    digest: str | None = Field(
        default=None,
        max_length=128,
        description="Optional: the digest of the call as status.pendingApprovals showed it; "
        "when given and the call's digest differs, the decision is not applied. Without it "
        "the decision is bound to the digest the operator recorded for the pending call.",
    )


class Usage(WireModel):
    """Model tokens and cost spent so far."""

    prompt_tokens: int = Field(default=0, ge=0, description="Input tokens sent to the model.")
    completion_tokens: int = Field(default=0, ge=0, description="Output tokens the model generated.")
    total_tokens: int = Field(default=0, ge=0, description="promptTokens + completionTokens.")
    cached_tokens: int = Field(
        default=0,
        ge=0,
        description="Of promptTokens, those the provider read from its prompt cache (billed at its "
        "cached-token price; 0 when the provider reports none).",
    )
    cost: float = Field(
        default=0.0,
        ge=0,
        description="Estimated cost in US dollars from litellm's price table; 0 when the model's price is unknown.",
    )


class ToolCall(WireModel):
    """One tool call the model made."""

    id: str = Field(
        min_length=1,
        description="Tool call id, unique within the run (the model's own when it sent a "
        "fresh one, else one the operator assigned).",
    )
    name: str = Field(description="Tool name, e.g. kubectl_describe.")
    description: str = Field(
        default="",
        description="One human-readable line for the call, e.g. 'kubectl describe pod web-1 -n shop'.",
    )
    status: str = Field(
        default="running",
        description="running, success, error, no_data, approval_required or denied.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Arguments the model passed to the tool.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
    digest: str = Field(
        default="",
        description="sha256 digest of the tool name and its exact arguments; a decision "
        "applies only to the call with this digest.",
    )


class PendingApproval(WireModel):
    """A tool call that waits for a decision in spec.decisions."""

    tool_call_id: str = Field(
        min_length=1,
        description="Tool call id; approve with "
        'kubectl patch --type merge -p \'{"spec":{"decisions":{"ID":{"approved":true}}}}\'.',
    )
    tool_name: str = Field(description="Tool the model wants to run.")
    description: str = Field(default="", description="One human-readable line saying what the call would do.")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Arguments the model passed to the tool.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
    digest: str = Field(
        default="",
        description="sha256 digest of the tool name and its exact arguments; a decision "
        "applies only to the call with this digest.",
    )


class TranscriptRef(WireModel):
    """Where the full, lossless transcript lives (outside status, owned by this resource)."""

    kind: str = Field(
        default="ConfigMap",
        description="Kind of the objects holding the transcript, in this namespace.",
    )
    names: list[str] = Field(
        default_factory=list,
        description="Names of those objects, in order; they are owned by this resource and deleted with it.",
    )
    messages: int = Field(default=0, ge=0, description="Number of messages stored so far.")
    records: int = Field(
        default=0,
        ge=0,
        description="Number of records stored so far (messages, tool starts and results, "
        "approvals, decisions, token counts, compactions, answers, errors): the length of "
        "the progress sequence.",
    )
