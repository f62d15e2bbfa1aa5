"""The records of a transcript, one typed shape per record type.

A transcript (`lestrade.runs.transcript`) is a list of JSON objects whose `t` says what each is.
These `TypedDict`s are those objects exactly as stored — so a record is written and read as the
plain dict it is on the wire, at no cost — and the type checker holds every writer and reader
to its shape: a reader narrows a `Record` by its `t` (`if record["t"] == RecordType.MESSAGE:`)
before it touches the fields of that type, and a misspelt field is a type error, not a `None`
at runtime. Readers still use `.get()` for the optional fields (`NotRequired`): a transcript is
stored data, and older runs wrote fewer fields.

Records a harness subagent writes also carry `agentId`, `parentId` and `depth` (`AgentFields`).
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

__all__ = [
    "RecordType",
    "RecordKind",
    "AgentFields",
    "MessageRecord",
    "ToolStartedRecord",
    "ToolLaunchedRecord",
    "ToolResultRecord",
    "PendingCall",
    "ApprovalNeededRecord",
    "DecisionRecord",
    "TokensRecord",
    "CompactionRecord",
    "TurnRecord",
    "AnswerRecord",
    "ErrorRecord",
    "AgentRecord",
    "Record",
]


class RecordType:
    """The values of a record's `t` (typed as literals, so a comparison narrows a `Record`)."""

    MESSAGE: Final = "message"
    TOOL_STARTED: Final = "tool_started"
    TOOL_LAUNCHED: Final = "tool_launched"
    TOOL_RESULT: Final = "tool_result"
    APPROVAL_NEEDED: Final = "approval_needed"
    DECISION: Final = "decision"
    TOKENS: Final = "tokens"
    COMPACTION: Final = "compaction"
    TURN: Final = "turn"
    ANSWER: Final = "answer"
    ERROR: Final = "error"
    AGENT: Final = "agent"
    """Harness sessions: a subagent started or ended (`event`: start | end, with agentId,
    parentId, depth), a model's reasoning (`event`: reasoning), or an event recorded as it was
    emitted (`event`: emit, `type`, `fields`; the rlm mode's REPL events). Records a subagent
    writes carry the same three fields; its messages are its own history, never the main
    agent's."""


RecordKind = Literal[
    "message",
    "tool_started",
    "tool_launched",
    "tool_result",
    "approval_needed",
    "decision",
    "tokens",
    "compaction",
    "turn",
    "answer",
    "error",
    "agent",
]


class AgentFields(TypedDict, total=False):
    """Which harness subagent wrote a record (absent: the main agent)."""

    agentId: str
    parentId: str
    depth: int


class MessageRecord(AgentFields):
    """An OpenAI chat message added to the conversation."""

    t: Literal["message"]
    message: dict[str, Any]
    context: NotRequired[dict[str, Any]]
    """Written through the context store (reference 004): the message's parts, token count, metadata, time."""


class ToolStartedRecord(AgentFields):
    """The call is about to run (its intent). `digest` is the `sha256:` digest of the call's
    tool name and exact arguments; `readOnly`: the tool declared the call read-only. A record
    without `intent` (older transcripts, harness subagents) also counts as `tool_launched`."""

    t: Literal["tool_started"]
    id: str
    digest: NotRequired[str]
    intent: NotRequired[bool]
    readOnly: NotRequired[bool]


class ToolLaunchedRecord(AgentFields):
    """A call that may have an effect launches now: after a restart it never runs again."""

    t: Literal["tool_launched"]
    id: str
    digest: NotRequired[str]


class ToolResultRecord(AgentFields):
    """How a call ended (its output is the tool message that follows)."""

    t: Literal["tool_result"]
    id: str
    name: str
    status: str
    description: str
    digest: NotRequired[str]


class PendingCall(AgentFields):
    """A call waiting for a person's decision (`frontend`: a pause-mode frontend tool's call,
    which the client runs)."""

    toolCallId: str
    toolName: str
    description: str
    params: dict[str, Any]
    digest: NotRequired[str]
    frontend: NotRequired[bool]


class ApprovalNeededRecord(AgentFields):
    t: Literal["approval_needed"]
    pending: list[PendingCall]


class DecisionRecord(AgentFields):
    """A person's decision the run acted upon, bound to the digest of the call that waited for
    it (`rule`: the harness permission rule that decided instead of a person)."""

    t: Literal["decision"]
    id: str
    approved: bool
    reason: str | None
    digest: NotRequired[str | None]
    rule: NotRequired[str]


class TokensRecord(AgentFields):
    """The tokens and cost of one model call, with the window then."""

    t: Literal["tokens"]
    promptTokens: int
    completionTokens: int
    totalTokens: int
    cost: float
    cachedTokens: NotRequired[int]
    breakdown: NotRequired[dict[str, int]]
    maxTokens: NotRequired[int]
    maxOutputTokens: NotRequired[int]
    truncations: NotRequired[list[dict[str, Any]]]


class CompactionRecord(AgentFields):
    """The working history became `messages` followed by the raw messages from number `at` on."""

    t: Literal["compaction"]
    at: int
    messages: list[dict[str, Any]]
    tokensBefore: int
    tokensAfter: int
    context: NotRequired[dict[str, Any]]
    """Written through the context store: the replacement as the client sent it."""


class TurnRecord(AgentFields):
    """A Conversation turn starts (its user message follows)."""

    t: Literal["turn"]
    index: int
    at: NotRequired[str]


class AnswerRecord(AgentFields):
    """The run (or turn) answered (`reason`, `iterations`: how an rlm session ended)."""

    t: Literal["answer"]
    text: str
    sections: NotRequired[dict[str, str] | None]
    at: NotRequired[str]
    reason: NotRequired[str]
    iterations: NotRequired[int]


class ErrorRecord(AgentFields):
    """The run (or turn) failed."""

    t: Literal["error"]
    reason: str
    message: str
    at: NotRequired[str]


class AgentRecord(AgentFields):
    """A harness event (see `RecordType.AGENT`)."""

    t: Literal["agent"]
    event: str
    task: NotRequired[str]
    maxIterations: NotRequired[int]
    content: NotRequired[str]
    reason: NotRequired[str]
    iterations: NotRequired[int]
    error: NotRequired[str]
    type: NotRequired[str]
    fields: NotRequired[dict[str, Any]]


Record = (
    MessageRecord
    | ToolStartedRecord
    | ToolLaunchedRecord
    | ToolResultRecord
    | ApprovalNeededRecord
    | DecisionRecord
    | TokensRecord
    | CompactionRecord
    | TurnRecord
    | AnswerRecord
    | ErrorRecord
    | AgentRecord
)
"""Any record of a transcript."""
