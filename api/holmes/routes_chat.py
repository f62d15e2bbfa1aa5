"""`/api/chat`, `/api/stream/chat`, `/api/issue_chat`, `/api/stream/issue_chat`,
`/api/workload_health_chat` and `/api/model` (references 000 and 001).

Each request becomes a Conversation turn (`chats.py`); the answer, or the stream, is read
from the Conversation's transcript as the operator writes it (`runs.py`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from lestrade.api.base.auth import authorize, writer_for
from lestrade.api.holmes import streams
from lestrade.api.holmes.chats import (
    ChatStore,
    ClientError,
    check_history,
    check_images,
    check_model,
    check_response_format,
    request_annotations,
)
from lestrade.api.holmes.events import tool_calls_of
from lestrade.api.holmes.requests import REQUEST_ID_HEADER, error_response, new_request_id
from lestrade.api.holmes.runs import RunCursor
from lestrade.api.holmes.schemas import (
    ChatRequest,
    ChatResponse,
    IssueChatRequest,
    ModelsResponse,
    WorkloadHealthChatRequest,
)
from lestrade.api.holmes.services import Services, services
from lestrade.api.holmes.streams import resumed_stream
from lestrade.resources import CONVERSATION_PLURAL
from lestrade.resources.tool_names import BUILTIN_TOOL_NAMES

__all__ = ["router"]

router = APIRouter()

CONTEXT_LIMIT = 32768
"""Characters of issue or workload context a new chat carries in its system prompt."""


@router.get("/api/model", response_model=ModelsResponse)
async def models(request: Request) -> ModelsResponse:
    """The modelList names a request's `model` may use."""
    return ModelsResponse(model_name=list(services(request).models.models))


def _unsupported(req: ChatRequest) -> None:
    """Documented fields this server does not implement yet: refused, never silently dropped
    (an ignored response_format would hand the client prose where it expects JSON)."""
    tools = req.frontend_tools or []
    if any(t.mode == "pause" for t in tools) and not req.stream:
        raise ClientError(400, "frontend_tools", "pause-mode frontend tools require stream: true")
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ClientError(400, "frontend_tools", "tool names must be unique")
    clashes = sorted(set(names) & BUILTIN_TOOL_NAMES)
    if clashes:
        raise ClientError(400, "frontend_tools", f"{', '.join(clashes)}: the name of a built-in tool; rename it")
    check_response_format(req.response_format)


async def _allow(request: Request, verb: str) -> None:
    refusal = await authorize(request, verb, CONVERSATION_PLURAL)
    if refusal:
        raise ClientError(403, "authorization", refusal)


async def _start_chat(
    request: Request,
    svc: Services,
    req: ChatRequest | IssueChatRequest | WorkloadHealthChatRequest,
    *,
    endpoint: str,
    system_prompt: str | None = None,
) -> RunCursor:
    store: ChatStore = svc.chats
    model = check_model(svc.models, req.model)
    check_history(req.conversation_history)
    decisions = getattr(req, "tool_decisions", None) or []
    results = getattr(req, "frontend_tool_results", None) or []
    frontend_tools = [t.model_dump() for t in getattr(req, "frontend_tools", None) or []]
    approvals = bool(getattr(req, "enable_tool_approval", False))
    objects = svc.watches["conversations"].objects
    target = store.target(req.conversation_id, req.conversation_history, objects)
    if decisions or results:
        # a resume-only turn (`ask` empty or left out): the stored history goes on, and no
        # user message is added
        await _allow(request, "patch")
        return await store.decide(
            target,
            decisions,
            results,
            svc.watches["conversations"].objects,
            writer=writer_for(request, svc.kube),
        )
    if not req.ask:
        raise ClientError(
            422,
            "ask",
            "required (only a request that resumes a paused chat with "
            "tool_decisions or frontend_tool_results may leave it out)",
        )
    field = "conversation_id" if req.conversation_id else "conversation_history"
    controls = getattr(req, "behavior_controls", None)
    response_format = getattr(req, "response_format", None)
    images = check_images(getattr(req, "images", None))
    if target and req.conversation_id and target == req.conversation_id and not await store.known(target):
        target = None  # the client's own id for a new chat: recorded on the Conversation it starts
    if target:
        await _allow(request, "patch")
        # additional_system_prompt is not honoured here: the system prompt is fixed when the
        # Conversation's first turn starts.
        return await store.ask(
            target,
            req.ask,
            field=field,
            model=model,
            approvals=approvals,
            behavior_controls=controls,
            response_format=response_format,
            frontend_tools=frontend_tools,
            images=images,
            writer=writer_for(request, svc.kube),
        )
    await _allow(request, "create")
    additions = [p for p in (system_prompt, getattr(req, "additional_system_prompt", None)) if p]
    return await store.create(
        req.ask,
        endpoint=endpoint,
        model=model,
        approvals=approvals,
        system_prompt="\n\n".join(additions)[:CONTEXT_LIMIT] or None,
        history=req.conversation_history,
        behavior_controls=controls,
        response_format=response_format,
        frontend_tools=frontend_tools,
        images=images,
        writer=writer_for(request, svc.kube),
        annotations=request_annotations(req),
    )


async def _answer(svc: Services, cursor: RunCursor, request: Request) -> JSONResponse:
    """Waits for the turn to end and answers as HolmesGPT's chat endpoints do."""
    request_id = new_request_id()
    last, snapshot = await streams.last_event(svc, cursor, request, "conversation_id")
    state = snapshot.transcript
    since = state.turns.get(cursor.turn or 0, 0)
    if last.name == "error":
        return error_response(last.data, {"conversation_id": cursor.name}, request_id)
    body = ChatResponse(
        analysis=last.data.get("analysis"),
        conversation_history=last.data.get("conversation_history") or [],
        tool_calls=tool_calls_of(state, since),
        follow_up_actions=last.data.get("follow_up_actions") or [],
        pending_approvals=last.data.get("pending_approvals") if last.name == "approval_required" else None,
        metadata={**(last.data.get("metadata") or {}), "request_id": request_id},
        conversation_id=cursor.name,
    )
    return JSONResponse(body.model_dump(mode="json"), headers={REQUEST_ID_HEADER: request_id})


async def _chat(
    request: Request, req: Any, *, stream: bool, endpoint: str, system_prompt: str | None = None
) -> Response:
    svc = services(request)
    resumed = await resumed_stream(request, svc) if stream else None
    if resumed is not None:
        return resumed
    if isinstance(req, ChatRequest):
        _unsupported(req)
    cursor = await _start_chat(request, svc, req, endpoint=endpoint, system_prompt=system_prompt)
    return streams.stream(svc, cursor) if stream else await _answer(svc, cursor, request)


@router.post("/api/chat", response_model=ChatResponse)
async def chat(req: ChatRequest, request: Request) -> Response:
    """General chat; `stream: true` answers with SSE events."""
    return await _chat(request, req, stream=req.stream, endpoint="/api/chat")


@router.post("/api/stream/chat", response_model=None)
async def stream_chat(req: ChatRequest, request: Request) -> Response:
    """`/api/chat` as an SSE stream, whatever `stream` says."""
    return await _chat(request, req.model_copy(update={"stream": True}), stream=True, endpoint="/api/stream/chat")


def _issue_context(req: IssueChatRequest) -> str:
    result = req.investigation_result
    tools = json.dumps(result.tools or [], default=str)
    text = (
        f"The user is asking about an issue of type {req.issue_type!r} that was investigated "
        f"before. The investigation's result (from the client):\n{result.result or '(none)'}\n"
        f"Tools it used: {tools}"
    )
    return text[:CONTEXT_LIMIT]


@router.post("/api/issue_chat", response_model=ChatResponse)
async def issue_chat(req: IssueChatRequest, request: Request) -> Response:
    """Chat about an investigated issue; the investigation result frames a new chat."""
    return await _chat(request, req, stream=req.stream, endpoint="/api/issue_chat", system_prompt=_issue_context(req))


@router.post("/api/stream/issue_chat", response_model=None)
async def stream_issue_chat(req: IssueChatRequest, request: Request) -> Response:
    return await _chat(request, req, stream=True, endpoint="/api/stream/issue_chat", system_prompt=_issue_context(req))


def _workload_context(req: WorkloadHealthChatRequest) -> str:
    result = req.workload_health_result
    text = (
        f"The user is asking about the health of this workload: {json.dumps(req.resource, default=str)}. "
        f"An earlier health check said (from the client):\n{result.analysis or '(none)'}\n"
        f"Tools it used: {json.dumps(result.tools or [], default=str)}"
    )
    return text[:CONTEXT_LIMIT]


@router.post("/api/workload_health_chat", response_model=ChatResponse)
async def workload_health_chat(req: WorkloadHealthChatRequest, request: Request) -> Response:
    return await _chat(
        request,
        req,
        stream=req.stream,
        endpoint="/api/workload_health_chat",
        system_prompt=_workload_context(req),
    )
