"""The context store's REST API (reference 004) under `/v1`, and its `/health` checks.

Every answer, errors included, has the documented shape: errors are `{"error": code,
"message": ...}` with codes `invalid_payload` (400), `unauthorized` (401), `forbidden` (403),
`not_found` (404), `conflict` / `context_tombstoned` (409), `internal_error` (500) and
`unavailable` (503). Request bodies are validated here (not by FastAPI's 422) so that a bad
field is a 400 naming it. The store itself is `contexts.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Literal

import aiohttp
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lestrade.api.base.auth import authorize, writer_for
from lestrade.api.contexts.messages import ContextMessage
from lestrade.api.contexts.store import ContextError, ContextStore
from lestrade.api.holmes.services import services
from lestrade.kube import ApiException, api_path
from lestrade.resources import CONVERSATION_PLURAL
from lestrade.resources.conversation import ContextSettings

__all__ = ["router", "install", "READY_TIMEOUT"]

log = logging.getLogger(__name__)

router = APIRouter()

READY_TIMEOUT = 3.0
"""Seconds `/health/ready` waits for the apiserver before answering 503."""

MAX_TAIL_LIMIT = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PolicyConfig(_Strict):
    limit: int | None = Field(default=None, ge=1)
    skip_kinds: list[str] | None = Field(default=None, min_length=1, max_length=16)


class Policy(_Strict):
    strategy: Literal["last_n", "skip_parts", "manual"]
    config: PolicyConfig = Field(default_factory=PolicyConfig)


class PutContext(_Strict):
    token_budget: int | None = Field(default=None, ge=1)
    trigger_ratio: float = Field(default=0.7, gt=0, le=1)
    policy: Policy | None = None
    metadata: dict[str, Any] | None = None


class AppendMessage(_Strict):
    message: ContextMessage
    if_version: int | None = Field(default=None, ge=0)


class Compact(_Strict):
    replacement: list[ContextMessage] = Field(min_length=1, max_length=10_000)
    if_version: int | None = Field(default=None, ge=0)


class PatchMetadata(_Strict):
    metadata: dict[str, Any]


async def _body(request: Request, model: type[BaseModel]) -> Any:
    try:
        raw = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ContextError(400, "invalid_payload", "the body is not valid JSON") from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ContextError(400, "invalid_payload", f"{where}: {first['msg']}") from None


def _int(request: Request, name: str, default: int | None, low: int, high: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ContextError(400, "invalid_payload", f"{name}: not an integer: {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ContextError(400, "invalid_payload", f"{name}: must be {bound}, not {value}")
    return value


async def _allow(request: Request, verb: str) -> None:
    refusal = await authorize(request, verb, CONVERSATION_PLURAL)
    if refusal:
        raise ContextError(403, "forbidden", refusal)


def _store(request: Request) -> ContextStore:
    return request.app.state.contexts  # type: ignore[no-any-return]


def _settings_wire(req: PutContext) -> dict[str, Any]:
    policy = None
    if req.policy is not None:
        policy = {
            "policy": req.policy.strategy,
            "limit": req.policy.config.limit,
            "skip_kinds": req.policy.config.skip_kinds,
        }
    try:
        settings = ContextSettings.model_validate(
            {
                "token_budget": req.token_budget,
                "trigger_ratio": req.trigger_ratio,
                "compaction": policy,
                "metadata": req.metadata,
            }
        )
    except ValidationError as exc:  # the resource's own limits (e.g. skip_kinds entries)
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]).replace("compaction", "policy.config")
        raise ContextError(400, "invalid_payload", f"{where}: {first['msg']}") from None
    return settings.to_wire()


@router.put("/v1/contexts/{context_id}")
async def put_context(context_id: str, request: Request) -> JSONResponse:
    req = await _body(request, PutContext)
    await _allow(request, "create")
    await _allow(request, "patch")
    store = _store(request)
    stored = await store.put(context_id, _settings_wire(req), writer_for(request, store.kube))
    return JSONResponse(store.describe(stored))


@router.get("/v1/contexts/{context_id}")
async def get_context(context_id: str, request: Request) -> JSONResponse:
    await _allow(request, "get")
    store = _store(request)
    return JSONResponse(store.describe(await store.read(context_id)))


@router.delete("/v1/contexts/{context_id}")
async def delete_context(context_id: str, request: Request) -> JSONResponse:
    await _allow(request, "patch")
    store = _store(request)
    return JSONResponse(store.describe(await store.tombstone(context_id, writer_for(request, store.kube))))


@router.post("/v1/contexts/{context_id}/messages")
async def append_message(context_id: str, request: Request) -> JSONResponse:
    req = await _body(request, AppendMessage)
    await _allow(request, "patch")
    message: ContextMessage = req.message
    store = _store(request)
    answer = await store.append(
        context_id,
        message.role,
        [p.model_dump() for p in message.parts],
        message.token_count,
        message.metadata,
        req.if_version,
        writer_for(request, store.kube),
    )
    return JSONResponse(answer)


@router.get("/v1/contexts/{context_id}/tail")
async def tail(context_id: str, request: Request) -> JSONResponse:
    limit = _int(request, "limit", 100, 1, MAX_TAIL_LIMIT)
    offset = _int(request, "offset", 0, 0)
    await _allow(request, "get")
    store = _store(request)
    stored = await store.read(context_id)
    assert limit is not None and offset is not None
    return JSONResponse({"messages": store.tail(stored, offset, limit)})


@router.get("/v1/contexts/{context_id}/context")
async def context_window(context_id: str, request: Request) -> JSONResponse:
    budget = _int(request, "budget_tokens", None, 1)
    if_version = _int(request, "if_version", None, 0)
    await _allow(request, "get")
    store = _store(request)
    stored = await store.read(context_id)
    if if_version is not None and if_version != stored.state.version:
        raise ContextError(
            409, "conflict", f"Context version changed (expected {if_version}, found {stored.state.version})"
        )
    return JSONResponse(store.window(stored, budget))


@router.post("/v1/contexts/{context_id}/compact")
async def compact(context_id: str, request: Request) -> JSONResponse:
    req = await _body(request, Compact)
    await _allow(request, "patch")
    replacement = [{"role": m.role, "parts": [p.model_dump() for p in m.parts]} for m in req.replacement]
    store = _store(request)
    return JSONResponse(await store.compact(context_id, replacement, req.if_version, writer_for(request, store.kube)))


@router.patch("/v1/contexts/{context_id}/metadata")
async def patch_metadata(context_id: str, request: Request) -> JSONResponse:
    req = await _body(request, PatchMetadata)
    await _allow(request, "patch")
    store = _store(request)
    stored = await store.patch_metadata(context_id, req.metadata, writer_for(request, store.kube))
    return JSONResponse(store.describe(stored))


@router.get("/health/live")
async def live() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready")
async def ready(request: Request) -> JSONResponse:
    """Ready when the apiserver answers (the store has nothing else to depend on)."""
    kube = services(request).kube
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            await kube.get(api_path("v1", "namespaces", None, services(request).namespace))
    except Exception as exc:  # unreachable, refused, timed out: all mean "not ready"
        if isinstance(exc, ApiException) and exc.status < 500:
            return JSONResponse({"status": "ok"})  # it answered (even a refusal is an answer)
        reason = "no answer" if isinstance(exc, TimeoutError) else str(exc)
        return JSONResponse(
            {"error": "unavailable", "message": f"the Kubernetes API cannot be reached: {reason}"},
            status_code=503,
        )
    return JSONResponse({"status": "ok"})


def install(app: FastAPI, store: ContextStore) -> None:
    """Adds the routes, the store and the error shape to `app`."""
    app.state.contexts = store
    app.include_router(router)

    @app.exception_handler(ContextError)
    async def context_error(request: Request, exc: ContextError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        """Under /v1 the documented shape: 503 when the apiserver failed or could not be
        reached (retry with backoff), 500 otherwise; elsewhere Starlette's plain 500."""
        if not request.url.path.startswith("/v1/"):
            return PlainTextResponse("Internal Server Error", status_code=500)
        if isinstance(exc, (OSError, TimeoutError, aiohttp.ClientError)) or (
            isinstance(exc, ApiException) and (exc.status or 0) >= 500
        ):
            return JSONResponse(
                {"error": "unavailable", "message": f"the Kubernetes API failed: {exc}"[:500]}, status_code=503
            )
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return JSONResponse({"error": "internal_error", "message": type(exc).__name__}, status_code=500)
