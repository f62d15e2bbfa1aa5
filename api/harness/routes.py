"""Reference 003, the agent-harness chat API: `POST /chat` and `POST /chat/relay/:relayId`.

`POST /chat` creates a harness session — a Conversation with `spec.harness` (mode,
permissions, maxIterations, maxDepth), the model and the system-prompt addition — as the
caller, and streams 003's events (`harness_events.py`) from its transcript: `connected` with
the `sessionId` (the Conversation's name) first, then the run until the main agent's
`harness_end` or an `error`. The operator runs the session; a client that disconnects stops
only its stream, and `kubectl get conv <sessionId>` shows the session.

`POST /chat/relay/:relayId` answers a relay (`harness_relay.py`). Error bodies are 003's
`{"error": ...}`: 400 (bad JSON, missing fields, a model that is not allowed), 403 (the caller
may not create or patch Conversations), 404 (`Session not found`, `Relay not found`), 409 (the
relay was already decided).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from lestrade.api.base.auth import authorize, writer_for
from lestrade.api.base.follow import ResourceGone, Snapshot
from lestrade.api.harness.events import error_event, harness_events, run_id
from lestrade.api.harness.relay import resolve_relay
from lestrade.api.harness.requests import ChatRequest, HarnessError, parse_chat, parse_relay
from lestrade.api.holmes.chats import api_object
from lestrade.api.holmes.runs import RunCursor
from lestrade.api.holmes.services import Services, ServicesDep
from lestrade.api.holmes.sse import sse_response
from lestrade.kube import ApiException, resource_path
from lestrade.resources import CONVERSATION_KIND, CONVERSATION_PLURAL

__all__ = ["router", "ENDPOINT"]

router = APIRouter()

ENDPOINT = "/chat"


def _error(exc: HarnessError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status)


def _spec(req: ChatRequest) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "turns": [{"ask": req.ask}],
        "harness": req.harness.to_wire(),
    }
    if req.model:
        spec["model"] = req.model
    if req.system_prompt:
        spec["systemPrompt"] = req.system_prompt
    return spec


def _turn_failure(snapshot: Snapshot) -> str | None:
    turns = snapshot.status.get("turns") or []
    if turns and turns[0].get("phase") == "Failed":
        return str(turns[0].get("message") or "the session failed")
    return None


def _stream(svc: Services, name: str, max_iterations: int) -> Response:
    run = run_id(name, 0)

    async def events() -> AsyncIterator[tuple[str, dict[str, Any], Any]]:
        yield "connected", {"type": "connected", "sessionId": name}, None
        delivered = (-1, -1)
        try:
            async for snapshot in svc.follower.snapshots((CONVERSATION_PLURAL, svc.namespace, name)):
                state = snapshot.transcript
                start = state.turns.get(0)
                if start is not None:
                    for event in harness_events(state, start, run, max_iterations):
                        if event.position <= delivered:
                            continue
                        delivered = event.position
                        yield event.name, event.data, None
                        if event.ends_stream:
                            return
                failure = _turn_failure(snapshot)
                if failure is not None:  # a failure that never reached the transcript
                    yield "error", error_event(run, failure), None
                    return
        except ResourceGone as exc:
            yield "error", error_event(run, str(exc)), None

    return sse_response(events(), RunCursor(CONVERSATION_PLURAL, svc.namespace, name, turn=0), keepalive=svc.keepalive)


@router.post("/chat", response_model=None)
async def chat(request: Request, svc: ServicesDep) -> Response:
    """Start a harness session and stream its events (reference 003)."""
    try:
        req = parse_chat(await request.body(), svc.models)
    except HarnessError as exc:
        return _error(exc)
    refusal = await authorize(request, "create", CONVERSATION_PLURAL)
    if refusal:
        return JSONResponse({"error": refusal}, status_code=403)
    name = f"harness-{secrets.token_hex(8)}"
    writer = writer_for(request, svc.kube)
    try:
        await writer.create(
            resource_path(CONVERSATION_PLURAL, svc.namespace),
            api_object(CONVERSATION_KIND, name, ENDPOINT, writer, _spec(req)),
        )
    except ApiException as exc:
        if exc.status in (400, 403, 422):
            return JSONResponse(
                {"error": f"the session was refused: {exc.reason}: {exc.body}"},
                status_code=400 if exc.status != 403 else 403,
            )
        raise
    return _stream(svc, name, req.harness.max_iterations)


@router.post("/chat/relay/{relay_id}", response_model=None)
async def relay(relay_id: str, request: Request, svc: ServicesDep) -> Response:
    """Answer a relay (a tool call waiting for permission): `{sessionId, response}`."""
    try:
        answer = parse_relay(await request.body())
    except HarnessError as exc:
        return _error(exc)
    refusal = await authorize(request, "patch", CONVERSATION_PLURAL)
    if refusal:
        return JSONResponse({"error": refusal}, status_code=403)
    try:
        await resolve_relay(svc.follower, writer_for(request, svc.kube), svc.namespace, relay_id, answer)
    except HarnessError as exc:
        return _error(exc)
    return JSONResponse({"success": True})
