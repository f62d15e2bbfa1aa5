"""Request and response bodies of the HolmesGPT-compatible endpoints (references 000 and 001).

Field names, types and defaults are the references'. Limits follow the resources the requests
become (an ask is a Conversation turn, so it has a turn's maximum length), so a request the
apiserver would refuse is refused here first with a 422 naming the field. Unknown fields are
ignored, as HolmesGPT's own server does, so newer clients keep working.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lestrade.resources.conversation import MAX_ASK_LENGTH

MAX_META_BYTES = 4096
"""`meta` of a chat request, kept as an annotation of the Conversation."""

__all__ = [
    "MAX_META_BYTES",
    "ChatRequest",
    "IssueChatRequest",
    "WorkloadHealthChatRequest",
    "InvestigateRequest",
    "WorkloadHealthRequest",
    "ToolDecision",
    "FrontendTool",
    "FrontendToolResult",
    "ImageSpec",
    "ChatResponse",
    "InvestigationResponse",
    "ModelsResponse",
]

MAX_HISTORY_MESSAGES = 5000
MAX_TEXT = 65536


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ToolDecision(_Body):
    tool_call_id: str = Field(min_length=1, max_length=253, description="Id from pending_approvals.")
    approved: bool = Field(description="true runs the call as the server's transcript holds it.")
    reason: str | None = Field(default=None, max_length=4096, description="Why (shown to the model).")
    ticket: str | None = Field(
        default=None,
        max_length=128,
        description="The pending approval's ticket: when given, the decision is refused (400) "
        "unless the waiting call is the one the ticket was issued for. Without it the decision "
        "is bound to the stored call the server holds as waiting.",
    )


class FrontendTool(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str = Field(max_length=4096)
    parameters: dict[str, Any] | None = None
    mode: Literal["pause", "noop"] = "pause"
    noop_response: str | None = Field(default=None, max_length=4096)


class FrontendToolResult(_Body):
    tool_call_id: str = Field(min_length=1, max_length=253)
    tool_name: str = Field(min_length=1, max_length=128)
    result: str = Field(max_length=65536, description="The tool's output (JSON-encode objects).")


class ImageSpec(_Body):
    url: str = Field(min_length=1)
    detail: Literal["low", "high", "auto"] | None = None
    format: str | None = None


class _ChatFields(_Body):
    ask: str | None = Field(
        default=None,
        max_length=MAX_ASK_LENGTH,
        description="The user's question. Required, except in a request that only resumes a "
        'paused chat with tool_decisions or frontend_tool_results (then it may be "" or '
        "left out: the chat goes on from its history, with no new user message).",
    )
    conversation_history: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=MAX_HISTORY_MESSAGES,
        description="The history a previous response returned (first message must be system).",
    )
    model: str | None = Field(default=None, max_length=253, description="A modelList name.")
    conversation_id: str | None = Field(
        default=None,
        max_length=253,
        description="The conversation to continue: a Conversation's name (every response says "
        "it) or the client's own id of a chat it started with that id; an id the server does not "
        "know starts a new Conversation recording it. Found in conversation_history when omitted.",
    )
    user_id: str | None = Field(
        default=None, max_length=253, description="The client's user id (recorded, not verified)."
    )
    user_email: str | None = Field(
        default=None, max_length=320, description="The client's user email (recorded, not verified)."
    )
    request_source: str | None = Field(
        default=None, max_length=253, description="Where the request comes from, e.g. slack, ui, api."
    )
    source_ref: str | None = Field(
        default=None, max_length=2048, description="A reference in that source, e.g. a Slack thread URL."
    )
    meta: dict[str, Any] | None = Field(default=None, description="Free-form client metadata (at most 4 KiB as JSON).")

    @field_validator("meta")
    @classmethod
    def _small_meta(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value, default=str)) > MAX_META_BYTES:
            raise ValueError(f"at most {MAX_META_BYTES} bytes as JSON")
        return value


class ChatRequest(_ChatFields):
    response_format: dict[str, Any] | None = None
    images: list[str | ImageSpec] | None = Field(default=None, max_length=32)
    stream: bool = False
    enable_tool_approval: bool = False
    tool_decisions: list[ToolDecision] | None = Field(default=None, max_length=500)
    frontend_tools: list[FrontendTool] | None = Field(default=None, max_length=32)
    frontend_tool_results: list[FrontendToolResult] | None = Field(default=None, max_length=64)
    additional_system_prompt: str | None = Field(default=None, max_length=32768)
    behavior_controls: dict[str, bool] | None = None


class InvestigationResult(_Body):
    result: str | None = None
    tools: list[Any] | None = None


class IssueChatRequest(_ChatFields):
    ask: str = Field(min_length=1, max_length=MAX_ASK_LENGTH)  # type: ignore[assignment]
    investigation_result: InvestigationResult
    issue_type: str = Field(max_length=1024)
    stream: bool = False


class WorkloadHealthResult(_Body):
    analysis: str | None = None
    tools: list[Any] | None = None


class WorkloadHealthChatRequest(_ChatFields):
    ask: str = Field(min_length=1, max_length=MAX_ASK_LENGTH)  # type: ignore[assignment]
    workload_health_result: WorkloadHealthResult
    resource: dict[str, Any]
    stream: bool = False


class InvestigateRequest(_Body):
    source: str = Field(min_length=1, max_length=253)
    title: str = Field(min_length=1, max_length=1024)
    description: str = Field(max_length=MAX_TEXT)
    subject: dict[str, Any]
    context: dict[str, Any]
    source_instance_id: str = "ApiRequest"
    include_tool_calls: bool = False
    include_tool_call_results: bool = False
    prompt_template: str = "builtin://generic_investigation.jinja2"
    sections: dict[str, str] | None = Field(default=None, max_length=50)
    model: str | None = Field(default=None, max_length=253)


class WorkloadHealthRequest(_Body):
    ask: str = Field(min_length=1, max_length=32768)
    resource: dict[str, Any]
    alert_history_since_hours: float = 24
    alert_history: bool = True
    stored_instructions: bool = True
    instructions: list[str] = Field(default_factory=list, max_length=100)
    include_tool_calls: bool = False
    include_tool_call_results: bool = False
    prompt_template: str = "builtin://kubernetes_workload_ask.jinja2"
    model: str | None = Field(default=None, max_length=253)


class ChatResponse(BaseModel):
    analysis: str | None = None
    conversation_history: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    follow_up_actions: list[dict[str, Any]] = Field(default_factory=list)
    pending_approvals: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    conversation_id: str = Field(description="Lestrade extension: the Conversation's name.")


class InvestigationResponse(BaseModel):
    analysis: str | None = None
    sections: dict[str, str] | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    instructions: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    investigation: str = Field(description="Lestrade extension: the Investigation's name.")


class ModelsResponse(BaseModel):
    model_name: list[str]
