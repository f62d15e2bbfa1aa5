"""`/api/investigate`, `/api/stream/investigate` and `/api/workload_health_check` (reference
001): each request becomes an Investigation, which the operator runs; the answer, or the
stream, is read from its transcript.

The API creates Investigations with `enableToolApproval: false`, as HolmesGPT's server mode
does: a call that would need approval becomes an error the model sees, and nobody waits.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from lestrade.api.base.auth import authorize, writer_for
from lestrade.api.holmes.chats import ClientError, api_object, apiserver_refusal, check_model
from lestrade.api.holmes.events import tool_calls_of
from lestrade.api.holmes.requests import REQUEST_ID_HEADER, error_response, new_request_id
from lestrade.api.holmes.runs import RunCursor
from lestrade.api.holmes.schemas import InvestigateRequest, InvestigationResponse, WorkloadHealthRequest
from lestrade.api.holmes.services import Services, ServicesDep
from lestrade.api.holmes.streams import last_event, resumed_stream, stream
from lestrade.api.holmes.workload import HEALTH_RESPONSE_FORMAT, HEALTH_SECTIONS, HealthAnswerError, health_answer
from lestrade.kube import ApiException, resource_path
from lestrade.resources import INVESTIGATION_KIND, INVESTIGATION_PLURAL

__all__ = ["router"]

router = APIRouter()


async def _create(request: Request, svc: Services, spec: dict[str, Any], endpoint: str) -> RunCursor:
    refusal = await authorize(request, "create", INVESTIGATION_PLURAL)
    if refusal:
        raise ClientError(403, "authorization", refusal)
    name = f"api-{secrets.token_hex(8)}"
    writer = writer_for(request, svc.kube)
    try:
        await writer.create(
            resource_path(INVESTIGATION_PLURAL, svc.namespace),
            api_object(
                INVESTIGATION_KIND,
                name,
                endpoint,
                writer,
                {**{k: v for k, v in spec.items() if v is not None}, "enableToolApproval": False},
            ),
        )
    except ApiException as exc:
        raise apiserver_refusal(exc, "body") from exc
    return RunCursor(INVESTIGATION_PLURAL, svc.namespace, name)


def _investigation_spec(req: InvestigateRequest, svc: Services) -> dict[str, Any]:
    return {
        "title": req.title,
        "description": req.description,
        "source": req.source,
        "subject": req.subject,
        "context": req.context,
        "sections": req.sections,
        "model": check_model(svc.models, req.model),
    }


def _health_spec(req: WorkloadHealthRequest, svc: Services) -> dict[str, Any]:
    kind = req.resource.get("kind") or "workload"
    name = req.resource.get("name") or ""
    question = req.ask
    if req.instructions:
        question += "\n\nInstructions:\n" + "\n".join(f"- {i}" for i in req.instructions)
    return {
        "title": f"Health check of {kind} {name}".strip()[:1024],
        "source": "workload_health_check",
        "subject": req.resource,
        "context": {"alert_history": req.alert_history, "alert_history_since_hours": req.alert_history_since_hours},
        "question": question,
        "model": check_model(svc.models, req.model),
        # the JSON object the Robusta runner parses (workload.py)
        "sections": HEALTH_SECTIONS,
        "responseFormat": json.dumps(HEALTH_RESPONSE_FORMAT),
    }


async def _answer(
    svc: Services, cursor: RunCursor, request: Request, *, tool_calls: bool, results: bool, health: bool = False
) -> JSONResponse:
    request_id = new_request_id()
    last, snapshot = await last_event(svc, cursor, request, "investigation")
    if last.name == "error":
        return error_response(last.data, {"investigation": cursor.name}, request_id)
    calls = tool_calls_of(snapshot.transcript) if tool_calls else []
    if not results:
        calls = [{**c, "result": {**c["result"], "data": None}} for c in calls]
    analysis = last.data.get("analysis")
    if health:
        try:
            analysis = json.dumps(health_answer(last.data.get("sections"), analysis))
        except HealthAnswerError as exc:
            # 502: the model, not the client, failed; the runner gets no prose to misparse
            return JSONResponse(
                {
                    "detail": f"the model's answer is not a health verdict: {exc}",
                    "analysis": last.data.get("analysis"),
                    "investigation": cursor.name,
                    "metadata": {"request_id": request_id},
                },
                502,
                headers={REQUEST_ID_HEADER: request_id},
            )
    body = InvestigationResponse(
        analysis=analysis,
        sections=last.data.get("sections"),
        tool_calls=calls,
        instructions=[],
        metadata={**(last.data.get("metadata") or {}), "request_id": request_id},
        investigation=cursor.name,
    )
    return JSONResponse(body.model_dump(mode="json"), headers={REQUEST_ID_HEADER: request_id})


@router.post("/api/investigate", response_model=InvestigationResponse)
async def investigate(req: InvestigateRequest, request: Request, svc: ServicesDep) -> Response:
    """Runs an Investigation and answers when it is done."""
    cursor = await _create(request, svc, _investigation_spec(req, svc), "/api/investigate")
    return await _answer(svc, cursor, request, tool_calls=req.include_tool_calls, results=req.include_tool_call_results)


@router.post("/api/stream/investigate", response_model=None)
async def stream_investigate(req: InvestigateRequest, request: Request, svc: ServicesDep) -> Response:
    """Runs an Investigation and streams its progress as SSE events."""
    resumed = await resumed_stream(request, svc)
    if resumed is not None:
        return resumed
    return stream(svc, await _create(request, svc, _investigation_spec(req, svc), "/api/stream/investigate"))


@router.post("/api/workload_health_check", response_model=InvestigationResponse)
async def workload_health_check(req: WorkloadHealthRequest, request: Request, svc: ServicesDep) -> Response:
    """A health check of one workload, as an Investigation with the ask as its question."""
    cursor = await _create(request, svc, _health_spec(req, svc), "/api/workload_health_check")
    return await _answer(
        svc, cursor, request, tool_calls=req.include_tool_calls, results=req.include_tool_call_results, health=True
    )
