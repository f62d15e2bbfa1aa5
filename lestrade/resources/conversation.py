"""The Conversation resource: a multi-turn chat with the agent, as a Kubernetes object.

A kubectl user asks by appending `{ask: ...}` to `spec.turns`; the HTTP chat endpoints do the
same. Answers come back in `status.turns`, index for index. Because the answers already given
depend on every earlier question, turns are append-only: the apiserver rejects edits and
removals (see `TURNS_APPEND_ONLY`), so the history the model saw is the history on record.

The context-window settings mirror the context-store API (reference 004): a token budget, a
trigger ratio at which compaction starts, and a compaction policy.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints

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
from lestrade.resources.constants import API_VERSION, CONVERSATION_KIND
from lestrade.resources.destination import DeliverTo, DeliveryRecord
from lestrade.resources.tenancy import Requester, RunScope

__all__ = [
    "ConversationPhase",
    "FrontendTool",
    "CompactionPolicy",
    "ContextSettings",
    "Turn",
    "TurnImage",
    "ConversationSpec",
    "TurnStatus",
    "ConversationStatus",
    "Conversation",
    "ToolPermission",
    "DenyRule",
    "Permissions",
    "HarnessSettings",
    "TURNS_APPEND_ONLY",
    "TOMBSTONE_FINAL",
]

MAX_TURNS = 200
MAX_ASK_LENGTH = 16384
MAX_TURN_IMAGES = 8
MAX_IMAGE_URL_LENGTH = 2048

# Old turns must survive every update unchanged and in place; new ones may only be added at
# the end. Two-variable comprehensions need Kubernetes 1.32 or newer. Placed on spec rather
# than on turns so that deleting the whole list is caught too (a rule on a field does not run
# when the field disappears).
TURNS_APPEND_ONLY = cel_rule(
    "!has(oldSelf.turns) || (has(self.turns) && self.turns.size() >= oldSelf.turns.size() "
    "&& oldSelf.turns.all(i, t, self.turns[i] == t))",
    "spec.turns is append-only: existing turns cannot be changed or removed; add a new turn at the end to ask again",
    reason="FieldValueForbidden",
    fieldPath=".turns",
)

# A tombstoned Conversation stays tombstoned and takes no new turns (context-store DELETE).
TOMBSTONE_FINAL = cel_rule(
    "!has(oldSelf.tombstoned) || !oldSelf.tombstoned || (has(self.tombstoned) && self.tombstoned "
    "&& (has(self.turns) ? self.turns.size() : 0) == (has(oldSelf.turns) ? oldSelf.turns.size() : 0))",
    "spec.tombstoned: this Conversation was deleted as a context (tombstoned); it cannot be "
    "reopened and takes no new turns",
    reason="FieldValueForbidden",
    fieldPath=".tombstoned",
)


class ConversationPhase(StrEnum):
    """State of the conversation (of its latest turn) or of one turn (the values of `Phase`
    a Conversation uses)."""

    PENDING = Phase.PENDING.value
    RUNNING = Phase.RUNNING.value
    AWAITING_APPROVAL = Phase.AWAITING_APPROVAL.value
    ANSWERED = Phase.ANSWERED.value
    FAILED = Phase.FAILED.value


class CompactionPolicy(WireModel):
    """How the context window is shrunk when it gets too full (context-store policies)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.policy == 'skip_parts' || !has(self.skipKinds)",
                    "skipKinds applies only to policy skip_parts",
                ),
                cel_rule(
                    "self.policy != 'skip_parts' || (has(self.skipKinds) && self.skipKinds.size() > 0)",
                    "policy skip_parts needs skipKinds: the part kinds to drop from older messages, e.g. [tool_result]",
                ),
            ]
        }
    )

    policy: Literal["last_n", "skip_parts", "manual"] = Field(
        description="last_n: keep only the most recent `limit` messages; skip_parts: drop "
        "the parts listed in skipKinds from older messages (the most recent `limit` "
        "messages stay whole); manual: never compact automatically."
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description="Messages kept whole (last_n, skip_parts). Operator default when omitted.",
    )
    skip_kinds: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] | None = Field(
        default=None,
        max_length=16,
        description="skip_parts only: kinds of message parts to drop from older messages, "
        "e.g. tool_result, tool_call, reasoning.",
    )


class ContextSettings(WireModel):
    """Context-window settings, as in the context-store API."""

    token_budget: int | None = Field(
        default=None,
        ge=1,
        description="Input tokens the context window may hold; the model's context window when omitted.",
    )
    trigger_ratio: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Compaction starts when the window passes tokenBudget x triggerRatio (greater than 0, at most 1).",
    )
    compaction: CompactionPolicy | None = Field(
        default=None,
        description="Compaction policy; the operator's default (a model-written summary of "
        "older messages) when omitted.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="The client's own data about the context (context-store metadata); not read by the operator.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )


class TurnImage(WireModel):
    """An image that goes with a question (for vision-capable models)."""

    url: str = Field(
        min_length=1,
        max_length=MAX_IMAGE_URL_LENGTH,
        description="Where the model fetches the image (https URL), or a small data: URI.",
    )
    detail: Literal["low", "high", "auto"] | None = Field(
        default=None, description="OpenAI's resolution hint: low, high or auto."
    )
    format: str | None = Field(default=None, max_length=64, description="MIME type, for providers that need it.")


class Turn(WireModel):
    """One question from the user."""

    ask: str = Field(
        min_length=1,
        max_length=MAX_ASK_LENGTH,
        description="The question or request, in plain language.",
    )
    images: list[TurnImage] | None = Field(
        default=None,
        max_length=MAX_TURN_IMAGES,
        description="Images sent with the question (the model must support vision).",
    )


class FrontendTool(WireModel):
    """A tool the client defines and runs itself (reference 000's frontend tools)."""

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Tool name; must not be one of the operator's own tools.",
    )
    description: str = Field(max_length=4096, description="What the tool does, for the model.")
    parameters: dict[str, Any] | None = Field(
        default=None,
        description="JSON schema of the tool's arguments.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
    mode: Literal["pause", "noop"] = Field(
        default="pause",
        description="pause: a call waits (like an approval) until spec.frontendToolResults "
        "has its output and spec.decisions approves it; noop: a call is answered at once "
        "with noopResponse and the client acts on it on the side.",
    )
    noop_response: str | None = Field(default=None, max_length=4096, description="The canned answer of a noop tool.")


class ToolPermission(WireModel):
    """A tool the harness session may run without asking (reference 003's permission rule)."""

    tool: str = Field(
        min_length=1,
        max_length=128,
        description="Tool name or a glob of names (fnmatch), e.g. kubectl_describe, kubectl_* or agent.",
    )
    params: dict[str, Annotated[str, StringConstraints(max_length=1024)]] | None = Field(
        default=None,
        max_length=32,
        description="Parameter name -> glob (fnmatch: *, ?, [...]) its value must match; a "
        "parameter named here that the call lacks never matches. Any arguments when omitted.",
    )


class DenyRule(WireModel):
    """A tool call the harness session refuses without asking."""

    tool_call_id: str = Field(min_length=1, max_length=253, description="The id of the tool call to refuse.")
    reason: str | None = Field(default=None, max_length=4096, description="Why; shown to the model.")


class Permissions(WireModel):
    """How a harness session decides tool calls: deny first, then allowlist and allowOnce;
    any other call waits as a relay (a pending approval in status.pendingApprovals)."""

    allowlist: list[ToolPermission] | None = Field(
        default=None, max_length=128, description="Calls that match run without asking."
    )
    allow_once: list[ToolPermission] | None = Field(
        default=None,
        max_length=128,
        description="Each entry lets one matching call run without asking; once used it is "
        "spent (the transcript records which entry a call used).",
    )
    deny: list[DenyRule] | None = Field(default=None, max_length=256, description="Tool calls refused by id.")


class HarnessSettings(WireModel):
    """Makes the Conversation an agent-harness session (reference 003, POST /chat)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.mode == 'agent' || self.mode == 'rlm'",
                    "spec.harness.mode must be agent or rlm",
                    fieldPath=".mode",
                ),
                cel_rule(
                    "!has(self.maxDepth) || (self.maxDepth >= 0 && self.maxDepth <= 5)",
                    "spec.harness.maxDepth must be between 0 and 5 (0: no subagents)",
                    fieldPath=".maxDepth",
                ),
                cel_rule(
                    "!has(self.maxIterations) || (self.maxIterations >= 1 && self.maxIterations <= 200)",
                    "spec.harness.maxIterations must be between 1 and 200",
                    fieldPath=".maxIterations",
                ),
            ]
        }
    )

    mode: Literal["agent", "rlm"] = Field(
        default="agent",
        description="agent: the tool-calling agent (with the `agent` tool for subagents); "
        "rlm: the model reasons by writing code that a sandboxed REPL runs.",
    )
    permissions: Permissions | None = Field(
        default=None,
        description="Tool permission rules; without them every tool call waits for a decision.",
    )
    max_iterations: int = Field(default=10, description="Model calls per agent (each subagent has its own).")
    max_depth: int = Field(
        default=2,
        description="How deep subagents may nest: the main agent is depth 0; a spawn from depth maxDepth is refused.",
    )


class ConversationSpec(WireModel):
    """The questions asked so far and how to answer them."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [TURNS_APPEND_ONLY, TOMBSTONE_FINAL]})

    turns: list[Turn] = Field(
        default_factory=list,
        max_length=MAX_TURNS,
        description="The user's questions, oldest first. Append-only: ask by adding "
        "{ask: ...} at the end; existing turns cannot be changed or removed. "
        "status.turns[i] answers turns[i].",
    )
    model: str | None = Field(
        default=None,
        max_length=253,
        description="Name of the model to use, from the operator's modelList; the default "
        "model when omitted. A change applies from the next turn.",
    )
    enable_tool_approval: bool = Field(
        default=True,
        description="true: tool calls that need approval pause the turn "
        "(phase AwaitingApproval) until spec.decisions has a decision for them; "
        "false: such calls are refused and the model is told so.",
    )
    decisions: dict[str, Decision] | None = Field(
        default=None,
        max_length=500,
        description="Approvals: tool call id (from status.pendingApprovals) -> {approved, reason}.",
    )
    context: ContextSettings | None = Field(default=None, description="Context-window size and compaction settings.")
    system_prompt: str | None = Field(
        default=None,
        max_length=32768,
        description="Extra instructions appended to the built-in system prompt (read when the first turn starts).",
    )
    behavior_controls: dict[str, bool] | None = Field(
        default=None,
        max_length=64,
        description="Prompt sections switched on (true) or off (false), by key: intro, "
        "ask_user, todowrite_instructions, ai_safety, toolset_instructions, "
        "permission_errors, general_instructions, style_guide, cluster_name, "
        "system_prompt_additions, files, todowrite_reminder, time_runbooks. Only within what "
        "the operator's ENABLED_PROMPTS allows. System sections are read when the first turn "
        "starts, user sections at every turn.",
    )
    frontend_tools: list[FrontendTool] | None = Field(
        default=None,
        max_length=32,
        description="Tools the client runs itself, offered to the model from the next model "
        "call on (clients send them with every request).",
    )
    frontend_tool_results: dict[str, Annotated[str, StringConstraints(max_length=65536)]] | None = Field(
        default=None,
        max_length=64,
        description="Outputs of paused frontend tool calls: tool call id -> output. A call "
        "waits until it has one here and an approval in spec.decisions.",
    )
    response_format: str | None = Field(
        default=None,
        max_length=65536,
        description="Structured output for the turns that start from now on: an OpenAI "
        'response_format as a JSON string, e.g. {"type": "json_schema", "json_schema": '
        '{"name": ..., "strict": true, "schema": {...}}}; the answer is then a JSON '
        "string that matches it.",
    )
    max_steps: int | None = Field(
        default=None,
        ge=1,
        le=200,
        description="Model calls per turn; the operator's default when omitted.",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens (prompt + completion) the turn may spend; once passed it "
        "ends with reason BudgetExceeded before its next model call, keeping what it found "
        "(transcript, tool calls, usage). No limit when omitted.",
    )
    max_cost: float | None = Field(
        default=None,
        ge=0,
        description="Most cost in US dollars (litellm's price table) the turn may spend; "
        "once passed it ends with reason BudgetExceeded. No limit when omitted.",
    )
    timeout: str | None = Field(
        default=None,
        pattern=DURATION_PATTERN,
        description="How long one turn may take (e.g. 90s, 10m), waiting for approval "
        "included; the operator's default when omitted.",
    )
    harness: HarnessSettings | None = Field(
        default=None,
        description="Agent-harness session settings (POST /chat): mode, permission rules, "
        "iteration and subagent depth limits. Absent for ordinary Conversations.",
    )
    tombstoned: bool | None = Field(
        default=None,
        description="true: closed (context-store DELETE): the messages stay readable, but no "
        "turn or message can be added any more. Cannot be undone.",
    )
    deliver: list[DeliverTo] | None = Field(
        default=None,
        max_length=16,
        description="Destinations (in this namespace) the operator sends each turn's result "
        "to, each with a condition: Always, OnFailure or OnFinding. Recorded in "
        "status.deliveries.",
    )

    def timeout_seconds(self) -> float | None:
        """spec.timeout in seconds, or None when unset."""
        return parse_duration(self.timeout) if self.timeout else None


class TurnStatus(WireModel):
    """The answer to one turn."""

    ask: str = Field(description="The question, copied from spec.turns for easy reading.")
    answer: str | None = Field(default=None, description="The answer, in markdown, once the turn is Answered.")
    phase: ConversationPhase = Field(
        default=ConversationPhase.PENDING,
        description="Pending, Running, AwaitingApproval, Answered or Failed.",
    )
    usage: Usage | None = Field(default=None, description="Tokens and cost of this turn.")
    message: str | None = Field(default=None, description="Why the turn failed, or what it is waiting for.")
    steps: int = Field(default=0, ge=0, description="Model calls made for this turn.")
    tool_call_count: int = Field(default=0, ge=0, description="Tool calls made for this turn.")
    start_time: datetime | None = Field(default=None, description="When the turn started.")
    completion_time: datetime | None = Field(default=None, description="When the turn was Answered or Failed.")


class ConversationStatus(WireModel):
    """Answers and progress. Written only by the operator."""

    phase: ConversationPhase | None = Field(
        default=None,
        description="State of the latest turn: Pending (nothing asked yet or not started), "
        "Running, AwaitingApproval (paused until spec.decisions answers "
        "status.pendingApprovals), Answered (every turn answered; append a turn to ask "
        "more) or Failed (the latest turn failed; append a turn to try again).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions: Answered (True when every turn has an answer) and AwaitingApproval.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    version: int = Field(
        default=0,
        ge=0,
        description="Increases by one with every message added to the conversation and "
        "every compaction; never decreases. Clients compare it to see whether anything "
        "changed.",
        json_schema_extra={"x-kubernetes-validations": [cel_rule("self >= oldSelf", "status.version never decreases")]},
    )
    turns: list[TurnStatus] = Field(
        default_factory=list,
        description="One entry per turn the operator has started on: turns[i] answers spec.turns[i].",
    )
    asked_turns: int = Field(default=0, ge=0, description="Number of turns asked (spec.turns) when status was written.")
    answered_turns: int = Field(default=0, ge=0, description="Number of turns that have an answer.")
    tool_calls: list[ToolCall] = Field(
        default_factory=list,
        description="Tool calls of the latest turn, oldest first (the transcript has every "
        "turn's calls and their output).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["id"],
        },
    )
    pending_approvals: list[PendingApproval] = Field(
        default_factory=list,
        description="Tool calls waiting for a decision in spec.decisions.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["toolCallId"],
        },
    )
    usage: Usage | None = Field(default=None, description="Tokens and cost spent by the whole conversation.")
    message: str | None = Field(default=None, description="Human-readable summary of the current state or the error.")
    model: str | None = Field(default=None, description="The model used for the latest turn.")
    transcript: TranscriptRef | None = Field(
        default=None, description="Where the full conversation with the model is kept."
    )
    requester: Requester | None = Field(
        default=None,
        description="Who created this resource, as recorded at admission (see README: who sees what).",
    )
    scope: RunScope | None = Field(default=None, description="What the tools of the latest run may read, and why.")
    last_activity_time: datetime | None = Field(default=None, description="When the latest turn started or finished.")
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


class Conversation(WireModel):
    """A Conversation object as read from the apiserver (metadata kept but not validated)."""

    api_version: Literal["lestrade.dev/v1alpha1"] = Field(default=API_VERSION, description="lestrade.dev/v1alpha1")
    kind: Literal["Conversation"] = Field(default=CONVERSATION_KIND, description="Conversation")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: ConversationSpec = Field(default_factory=ConversationSpec, description="The questions asked so far.")
    status: ConversationStatus = Field(default_factory=ConversationStatus, description="Answers and progress.")

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
