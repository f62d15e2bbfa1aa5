"""The Investigation resource: one troubleshooting run of the agent, as a Kubernetes object.

A person (or the API, for `/api/investigate`) writes the spec; the operator runs the agent and
reports progress in status. The spec is frozen once the run has started because the agent has
already acted on it; the one exception is `decisions`, which is how a person approves or
refuses tool calls while the run waits (see `immutability_rule`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from lestrade.resources.common import (
    DURATION_PATTERN,
    PRESERVE_UNKNOWN,
    Condition,
    Decision,
    PendingApproval,
    Phase,
    ToolCall,
    TranscriptRef,
    Usage,
    WireModel,
    cel_rule,
    parse_duration,
)
from lestrade.resources.constants import API_VERSION, INVESTIGATION_KIND
from lestrade.resources.destination import DeliverTo, DeliveryRecord
from lestrade.resources.tenancy import Requester, RunScope

__all__ = [
    "Finding",
    "InvestigationPhase",
    "InvestigationSpec",
    "InvestigationStatus",
    "Investigation",
    "MUTABLE_SPEC_FIELDS",
    "immutability_rule",
    "finished_is_final_rule",
    "SELECTABLE_FIELDS",
    "UNFINISHED_SELECTOR",
    "FINISHED_WITH_TTL_SELECTORS",
]

MAX_STEPS_LIMIT = 100

# Bounded so the immutability rule's cost estimate stays within the apiserver's CEL budget.
SectionText = Annotated[str, StringConstraints(max_length=8192)]


class InvestigationPhase(StrEnum):
    """Where the run is (the values of `Phase` an Investigation uses)."""

    PENDING = Phase.PENDING.value
    RUNNING = Phase.RUNNING.value
    AWAITING_APPROVAL = Phase.AWAITING_APPROVAL.value
    SUCCEEDED = Phase.SUCCEEDED.value
    FAILED = Phase.FAILED.value


class InvestigationSpec(WireModel):
    """What to investigate and how."""

    title: str = Field(
        min_length=1,
        max_length=1024,
        description="Short name of the problem, e.g. the alert name ('KubePodCrashLooping on shop/web-1'). Required.",
    )
    description: str | None = Field(
        default=None,
        max_length=65536,
        description="Longer description of the problem, e.g. the alert's description.",
    )
    source: str = Field(
        default="kubernetes",
        max_length=253,
        description="Where the problem was reported: kubernetes, prometheus, pagerduty, opsgenie, jira, ...",
    )
    subject: dict[str, Any] | None = Field(
        default=None,
        description="What the problem is about, free-form, as in /api/investigate "
        "(e.g. {name: web-1, namespace: shop, kind: Pod}).",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
    context: dict[str, Any] | None = Field(
        default=None,
        description="Extra facts for the investigation, free-form, as in /api/investigate "
        "(e.g. alert labels and annotations).",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
    question: str | None = Field(
        default=None,
        max_length=32768,
        description="An extra question to answer in addition to explaining the problem.",
    )
    model: str | None = Field(
        default=None,
        max_length=253,
        description="Name of the model to use, from the operator's modelList; the default model when omitted.",
    )
    sections: dict[str, SectionText] | None = Field(
        default=None,
        max_length=50,
        description="Sections the analysis must have: title -> what to write in it. "
        "HolmesGPT's investigation sections when omitted.",
    )
    response_format: str | None = Field(
        default=None,
        max_length=65536,
        description="Structured output: an OpenAI response_format as a JSON string (e.g. "
        '{"type": "json_schema", "json_schema": {...}}) sent with the run\'s model calls '
        "where the provider supports it (elsewhere the sections' instructions ask for the same "
        "JSON object); the sections are then the object's fields.",
    )
    max_steps: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEPS_LIMIT,
        description=f"Most model calls the run may make (1-{MAX_STEPS_LIMIT}); the run fails "
        "with reason StepLimit when it needs more. Operator default when omitted.",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens (prompt + completion) the run may spend; once passed it "
        "ends with reason BudgetExceeded before its next model call, keeping what it found "
        "(transcript, tool calls, usage). No limit when omitted.",
    )
    max_cost: float | None = Field(
        default=None,
        ge=0,
        description="Most cost in US dollars (litellm's price table) the run may spend; "
        "once passed it ends with reason BudgetExceeded. No limit when omitted.",
    )
    timeout: str | None = Field(
        default=None,
        max_length=64,
        pattern=DURATION_PATTERN,
        description="Longest the run may take, as a duration like 90s, 10m or 1h30m "
        "(time spent waiting for approval included). Operator default when omitted.",
    )
    enable_tool_approval: bool = Field(
        default=True,
        description="true: tool calls that need approval pause the run "
        "(phase AwaitingApproval) until spec.decisions has a decision for them; "
        "false: such calls are refused and the model is told so.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        description="Delete the Investigation this many seconds after it Succeeded or "
        "Failed; kept until deleted by hand when omitted.",
    )
    decisions: dict[str, Decision] | None = Field(
        default=None,
        max_length=500,
        description="Approvals: tool call id (from status.pendingApprovals) -> "
        "{approved, reason}. The only field that may change while the run is in progress.",
    )
    deliver: list[DeliverTo] | None = Field(
        default=None,
        max_length=16,
        description="Destinations (in this namespace) the operator sends the result to, each "
        "with a condition: Always, OnFailure or OnFinding. Recorded in status.deliveries.",
    )

    def timeout_seconds(self) -> float | None:
        """spec.timeout in seconds, or None when not set."""
        return parse_duration(self.timeout) if self.timeout else None


class Finding(WireModel):
    """One conclusion of the analysis and the tool calls it rests on."""

    section: str = Field(max_length=1024, description="The section of the analysis it is in.")
    text: str = Field(max_length=4096, description="The finding as the model wrote it.")
    evidence: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="Ids of the tool calls it cites (status.toolCalls / the transcript).",
    )
    grounded: bool = Field(
        description="True when it cites at least one call and every cited call is a call of the run.",
    )
    problem: str | None = Field(
        default=None,
        max_length=1024,
        description="Why it is not grounded: it cites no tool call, or calls the run never made.",
    )


class InvestigationStatus(WireModel):
    """What the operator found and how far it got. Written only by the operator."""

    phase: InvestigationPhase | None = Field(
        default=None,
        description="Pending (accepted, not started), Running, AwaitingApproval (paused "
        "until spec.decisions answers status.pendingApprovals), Succeeded or Failed.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions: Succeeded (Unknown while running, True or False at the end; "
        "kubectl wait --for=condition=Succeeded) and AwaitingApproval.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    analysis: str | None = Field(default=None, description="The analysis, in markdown, once the run succeeded.")
    sections: dict[str, str] | None = Field(
        default=None, description="The analysis split into the sections asked for in spec."
    )
    findings: list[Finding] | None = Field(
        default=None,
        max_length=40,
        description="The analysis's findings (all sections but next steps and links), each with "
        "the tool calls it cites as [evidence: id, ...]; a finding citing nothing or an unknown "
        "call is flagged (grounded: false).",
    )
    grounded_findings: str | None = Field(
        default=None,
        description="Findings that cite calls of the run, of all findings, e.g. '4/5'.",
    )
    tool_calls: list[ToolCall] = Field(
        default_factory=list,
        description="Tool calls made so far, oldest first (the transcript has their output).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["id"],
        },
    )
    tool_call_count: int = Field(default=0, ge=0, description="Number of tool calls made so far.")
    pending_approvals: list[PendingApproval] = Field(
        default_factory=list,
        description="Tool calls waiting for a decision in spec.decisions.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["toolCallId"],
        },
    )
    usage: Usage | None = Field(default=None, description="Tokens and cost spent so far.")
    steps: int = Field(default=0, ge=0, description="Model calls made so far.")
    start_time: datetime | None = Field(default=None, description="When the run started.")
    completion_time: datetime | None = Field(default=None, description="When the run Succeeded or Failed.")
    message: str | None = Field(default=None, description="Human-readable summary of the current state or the error.")
    model: str | None = Field(default=None, description="The model actually used (spec.model or the default).")
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


class Investigation(WireModel):
    """An Investigation object as read from the apiserver (metadata kept but not validated)."""

    api_version: Literal["lestrade.dev/v1alpha1"] = Field(default=API_VERSION, description="lestrade.dev/v1alpha1")
    kind: Literal["Investigation"] = Field(default=INVESTIGATION_KIND, description="Investigation")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: InvestigationSpec = Field(description="What to investigate and how.")
    status: InvestigationStatus = Field(default_factory=InvestigationStatus, description="What the operator found.")

    @property
    def name(self) -> str | None:
        """metadata.name"""
        return self.metadata.get("name")

    @property
    def namespace(self) -> str | None:
        """metadata.namespace"""
        return self.metadata.get("namespace")

    def manifest(self) -> dict[str, Any]:
        """The object to create: apiVersion, kind, metadata and spec (status belongs to the
        operator and would be dropped by the apiserver anyway)."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": dict(self.metadata),
            "spec": self.spec.to_wire(),
        }


# Spec fields a person may change after the run started.
MUTABLE_SPEC_FIELDS: frozenset[str] = frozenset({"decisions"})


def immutability_rule() -> dict[str, Any]:
    """The root-level CEL rule freezing the spec (except decisions) once the run started.

    It sits at the root of the schema because it must read oldSelf.status.phase and compare
    spec fields; a rule under spec cannot see status. Status-subresource writes pass because
    the apiserver keeps the old spec for them, so every comparison is equal. It is generated
    from the model's fields so a new spec field is frozen too without anyone remembering to.
    """
    checks = []
    for field in InvestigationSpec.model_fields.values():
        wire = field.alias
        assert wire is not None
        if wire in MUTABLE_SPEC_FIELDS:
            continue
        checks.append(
            f"(has(self.spec.{wire}) ? has(oldSelf.spec.{wire}) && "
            f"self.spec.{wire} == oldSelf.spec.{wire} : !has(oldSelf.spec.{wire}))"
        )
    started = "has(oldSelf.status) && has(oldSelf.status.phase) && oldSelf.status.phase != 'Pending'"
    return cel_rule(
        f"!({started}) || (" + " && ".join(checks) + ")",
        "spec is immutable once the investigation has started; only spec.decisions may change",
        messageExpression="'spec is immutable once the investigation is ' + "
        "oldSelf.status.phase + ': only spec.decisions may change "
        "(create a new Investigation to change anything else)'",
        reason="FieldValueForbidden",
        fieldPath=".spec",
    )


_FINISHED = (InvestigationPhase.SUCCEEDED.value, InvestigationPhase.FAILED.value)


def finished_is_final_rule() -> dict[str, Any]:
    """The root-level CEL rule keeping a finished Investigation finished.

    The operator stops watching finished Investigations (`UNFINISHED_SELECTOR`), and the
    transcript of a finished run is complete; a status edited back to Pending would start the
    run again from that transcript. So once status.phase is Succeeded or Failed it stays so
    (status-subresource writes included: the rule sits at the root, where it sees status)."""
    finished = "[" + ", ".join(f"'{p}'" for p in _FINISHED) + "]"
    was_finished = f"has(oldSelf.status) && has(oldSelf.status.phase) && oldSelf.status.phase in {finished}"
    return cel_rule(
        f"!({was_finished}) || (has(self.status) && has(self.status.phase) "
        "&& self.status.phase == oldSelf.status.phase)",
        "status.phase is final once the investigation has Succeeded or Failed",
        messageExpression="'status.phase is final once the investigation has ' + "
        "oldSelf.status.phase + ' (create a new Investigation to run again)'",
        reason="FieldValueForbidden",
        fieldPath=".status.phase",
    )


SELECTABLE_FIELDS: tuple[str, ...] = (
    ".status.phase",
    ".spec.ttlSecondsAfterFinished",
    ".status.delivery",
)
"""Fields the apiserver filters lists and watches by (`selectableFields` of the CRD): a
watcher that only needs unfinished runs (the operator) or finished runs with a TTL (its TTL
reaper) asks the apiserver for exactly those and never receives the others. A field that is
not set selects as the empty string."""

UNFINISHED_SELECTOR: str = ",".join(f"status.phase!={p}" for p in _FINISHED)
"""Field selector of the Investigations that are not finished (no phase yet included).
A watch with it sees an Investigation that finishes as DELETED (with its last unfinished
version): it has left the selection."""

FINISHED_WITH_TTL_SELECTORS: tuple[str, ...] = tuple(
    f"status.phase={p},spec.ttlSecondsAfterFinished!=" for p in _FINISHED
)
"""Field selectors of the finished Investigations that have a TTL, one per finished phase
(a field selector cannot say "one of")."""
