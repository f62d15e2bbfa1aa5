"""The typed event stream of the agent engine.

The loop (`lestrade.operator.agent.loop`) is an async generator of these events. The operator
turns them into status patches and transcript writes; the API turns them into SSE events. A
`yield` hands control to the consumer and the loop only continues when the consumer asks for
the next event, so a consumer that persists `ToolStarted` before asking for more has recorded
the intent before the tool runs (what restart-without-loss relies on).

Every message the loop adds to the conversation is announced with `MessageAdded`, in order, so
the consumer can keep a lossless transcript (OpenAI chat message dicts, as litellm takes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "AgentEvent",
    "MessageAdded",
    "ModelMessage",
    "ToolStarted",
    "ToolsStarting",
    "ToolResult",
    "Truncation",
    "ModelRetry",
    "CompactionStarted",
    "TokenCount",
    "ApprovalNeeded",
    "PendingApproval",
    "Compaction",
    "Answer",
    "AgentError",
]


@dataclass(frozen=True)
class MessageAdded:
    """A message was appended to the conversation (index = its position in the transcript)."""

    index: int
    message: dict[str, Any]
    kind: Literal["message"] = "message"


@dataclass(frozen=True)
class ModelMessage:
    """The model answered a step: text (may be empty) and the tool calls it asked for."""

    content: str
    tool_calls: list[dict[str, Any]]
    reasoning: str | None = None
    step: int = 0
    latency: float = 0.0
    """Seconds the model call took."""
    kind: Literal["model_message"] = "model_message"


@dataclass(frozen=True)
class ToolStarted:
    """A tool call is about to run. Persist this before asking for the next event."""

    call_id: str
    name: str
    params: dict[str, Any]
    description: str
    digest: str = ""
    """`sha256:` digest of the call's name and exact arguments (see `toolcalls.call_digest`)."""
    read_only: bool = False
    """The tool declares this call read-only: after a restart it is simply run again."""
    kind: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True)
class ToolsStarting:
    """The calls announced by the `ToolStarted` events just before start now, together.

    When one `may_act`, persist their intents (all of them, in one write) before asking for
    the next event: a restart then finds either every intent of the turn or none. A call that
    may have an effect is additionally announced to the `before_launch` hook of `Agent.run`
    right before it launches (its "launched" mark); a read-only one is not, it is simply run
    again, so a turn of reads may be persisted later (with its results)."""

    call_ids: list[str]
    may_act: bool = True
    """Some call of the turn is not declared read-only."""
    kind: Literal["tools_starting"] = "tools_starting"


@dataclass(frozen=True)
class Truncation:
    """A tool result cut to fit its share of the context window (reference 000's fields)."""

    tool_call_id: str
    tool_name: str
    start_index: int
    end_index: int
    original_token_count: int


@dataclass(frozen=True)
class ToolResult:
    """A tool call finished (status: success | error | no_data | approval_required | denied)."""

    call_id: str
    name: str
    status: str
    output: str
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    truncated: bool = False
    original_tokens: int | None = None
    truncation: Truncation | None = None
    digest: str = ""
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class TokenCount:
    """Usage after a model call: that call's usage and cost as the provider reported them
    (sum them for a run's total) plus the per-role breakdown of the window now."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost: float
    breakdown: dict[str, int]
    max_tokens: int
    max_output_tokens: int
    truncations: list[Truncation] = field(default_factory=list)
    cached_tokens: int = 0
    """Of `prompt_tokens`, those read from the provider's prompt cache."""
    kind: Literal["token_count"] = "token_count"


@dataclass(frozen=True)
class ModelRetry:
    """A model call failed and will be retried after `delay` seconds.

    reason: RateLimited | ServerError | ModelTimeout | ConnectionError | MalformedToolCall.
    """

    attempt: int
    reason: str
    delay: float
    message: str
    kind: Literal["model_retry"] = "model_retry"


@dataclass(frozen=True)
class PendingApproval:
    tool_call_id: str
    tool_name: str
    description: str
    params: dict[str, Any]
    digest: str = ""
    """What a decision for this call must carry to be applied (name + exact arguments)."""


@dataclass(frozen=True)
class ApprovalNeeded:
    """The run paused: these calls need a decision. Resume with `decisions` for every id,
    each carrying the call's `digest`."""

    pending: list[PendingApproval]
    kind: Literal["approval_needed"] = "approval_needed"


@dataclass(frozen=True)
class CompactionStarted:
    """The history passed the threshold; a summary call is about to run."""

    initial_tokens: int
    num_messages: int
    max_context_size: int
    threshold_pct: int
    kind: Literal["compaction_started"] = "compaction_started"


@dataclass(frozen=True)
class Compaction:
    """History was compacted by a model summary (the fields of reference 000's metadata).

    `messages` is the compacted working history; later `MessageAdded.index` values are
    positions in it. The raw transcript the consumer keeps is unaffected (append-only).
    """

    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    summary: str
    max_context_size: int = 0
    threshold_pct: int = 0
    compression_ratio_pct: float = 0.0
    compaction_cost: dict[str, float] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    kind: Literal["compaction"] = "compaction"


@dataclass(frozen=True)
class Answer:
    """The final answer; `sections` holds the structured sections when they were asked for."""

    text: str
    sections: dict[str, str] | None = None
    kind: Literal["answer"] = "answer"


@dataclass(frozen=True)
class AgentError:
    """The run failed; `reason` is a CamelCase machine word, `message` says what happened."""

    reason: str
    message: str
    kind: Literal["error"] = "error"


AgentEvent = (
    MessageAdded
    | ModelMessage
    | ToolStarted
    | ToolsStarting
    | ToolResult
    | TokenCount
    | ApprovalNeeded
    | ModelRetry
    | CompactionStarted
    | Compaction
    | Answer
    | AgentError
)
