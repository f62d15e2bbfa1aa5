"""The web console: static pages at `/` and `/console/*`, and the small JSON/SSE API they use
under `/api/console/`.

What a person sees is decided by Kubernetes, as for kubectl: the list holds the runs of the
namespaces where the signed-in user may `list` them (a SubjectAccessReview per namespace,
cached), a run's page needs `get`, and every write (decisions, a new investigation, a new
question) is made *as the user* (`auth.writer_for`, impersonation) after a review of that write,
so a user without the right sees the pending calls but the cluster refuses their decision.
With authentication off (a developer's `make run`) the API's own identity decides.

Live updates come from the API's shared watches (`watch.py`): one SSE stream per open page,
no watch of its own. The pages are plain ES modules with no build step and nothing loaded from
elsewhere; a strict Content-Security-Policy forbids inline scripts, so a model's answer that
slips markup into the page still cannot run anything (the pages also never parse it as HTML).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from lestrade.api.base.access import may
from lestrade.api.base.auth import requester_annotations, writer_for
from lestrade.api.holmes.chats import ClientError, apiserver_refusal, check_model
from lestrade.api.holmes.services import ServicesDep, services
from lestrade.api.holmes.sse import KeepAlive
from lestrade.kube import ApiException, resource_path
from lestrade.resources import (
    API_VERSION,
    CONVERSATION_KIND,
    CONVERSATION_PLURAL,
    GROUP,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
)
from lestrade.runs.summary import asks_of, run_summary, timeline

__all__ = ["router", "STATIC", "PUBLIC_PREFIX"]

router = APIRouter()
STATIC = Path(__file__).parent
PUBLIC_PREFIX = "/console/"
"""The pages' files: public like `/`, since they hold no data (the data needs a token)."""
_ASSET = re.compile(r"^[a-z][a-z0-9_-]*\.(js|css|html|svg)$")
_MEDIA = {"js": "text/javascript", "css": "text/css", "html": "text/html", "svg": "image/svg+xml"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
PLURALS = {INVESTIGATION_PLURAL: INVESTIGATION_KIND, CONVERSATION_PLURAL: CONVERSATION_KIND}


# -- pages -----------------------------------------------------------------------------------------


@router.get("/", include_in_schema=False)
async def index() -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=_HEADERS)


@router.get(PUBLIC_PREFIX + "{asset}", include_in_schema=False)
async def asset(asset: str) -> Response:
    path = STATIC / asset
    if not _ASSET.match(asset) or not path.is_file():
        return JSONResponse({"detail": f"no console file {asset!r}"}, status_code=404)
    return FileResponse(path, media_type=_MEDIA[asset.rsplit(".", 1)[1]], headers=_HEADERS)


# -- who may see and do what -----------------------------------------------------------------------


def _user(request: Request) -> str | None:
    return getattr(request.state, "user", None)


async def _require(request: Request, verb: str, plural: str, namespace: str) -> None:
    if not await may(request, verb, plural, namespace):
        who = _user(request) or "you"
        raise ClientError(
            403,
            "authorization",
            f"{who} may not {verb} {plural}.{GROUP} in namespace {namespace}; grant it with a Role/RoleBinding",
        )


NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_NAMESPACE = re.compile(NAMESPACE_PATTERN)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _ref(plural: str, namespace: str, name: str) -> str:
    """The resource's plural, once the path's parts are known to be names (never `..` or a
    slash smuggled into the apiserver path)."""
    if plural not in PLURALS:
        raise ClientError(404, "kind", f"{plural!r} is neither investigations nor conversations")
    if len(namespace) > 63 or not _NAMESPACE.match(namespace):
        raise ClientError(400, "namespace", f"{namespace!r} is not a namespace name")
    if len(name) > 253 or not _NAME.match(name):
        raise ClientError(400, "name", f"{name!r} is not a resource name")
    return plural


def _with_kind(plural: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": PLURALS[plural], **obj}


# -- reading -----------------------------------------------------------------------------------------


def _light(summary: dict[str, Any]) -> dict[str, Any]:
    """A list row: the summary without the (possibly long) answer."""
    return {k: v for k, v in summary.items() if k not in ("answer", "sections", "findings")}


async def _visible(request: Request, plural: str, namespace: str) -> bool:
    return await may(request, "list", plural, namespace)


@router.get("/api/console/runs")
async def runs(request: Request, svc: ServicesDep) -> dict[str, Any]:
    """The Investigations and Conversations the caller may list, newest first."""
    rows: list[dict[str, Any]] = []
    for plural in PLURALS:
        objects = list(svc.watches[plural].objects.values())
        allowed = {
            ns: await _visible(request, plural, ns) for ns in {o["metadata"].get("namespace", "") for o in objects}
        }
        rows += [
            _light(run_summary(_with_kind(plural, o))) for o in objects if allowed[o["metadata"].get("namespace", "")]
        ]
    rows.sort(key=lambda r: r["created"] or "", reverse=True)
    return {"user": _user(request), "namespace": svc.namespace, "models": list(svc.models.models), "runs": rows}


@router.get("/api/console/runs/{plural}/{namespace}/{name}")
async def run(plural: str, namespace: str, name: str, request: Request, svc: ServicesDep) -> dict[str, Any]:
    """One run: its summary, its transcript as a timeline, and whether the caller may decide
    its pending calls (and ask a Conversation more)."""
    await _require(request, "get", _ref(plural, namespace, name), namespace)
    obj = await svc.follower.get(plural, namespace, name)
    if obj is None:
        raise ClientError(404, "name", f"no {plural} {name!r} in namespace {namespace}")
    obj = _with_kind(plural, obj)
    state = await svc.follower.transcript(obj)
    return {
        "summary": run_summary(obj),
        "timeline": timeline(state, asks=asks_of(obj)),
        "mayDecide": await may(request, "patch", plural, namespace),
        "user": _user(request),
    }


@router.get("/api/console/events")
async def events(request: Request, svc: ServicesDep) -> Response:
    """SSE: `run` (a list row) each time a visible run changes, `deleted` when one goes."""

    async def stream() -> AsyncIterator[ServerSentEvent]:
        async with (
            svc.watches[INVESTIGATION_PLURAL].subscribe() as invs,
            svc.watches[CONVERSATION_PLURAL].subscribe() as convs,
        ):
            queues = {INVESTIGATION_PLURAL: invs, CONVERSATION_PLURAL: convs}
            getters = {asyncio.ensure_future(q.get()): p for p, q in queues.items()}
            yield ServerSentEvent(data="{}", event="ready")
            try:
                while True:
                    done, _ = await asyncio.wait(set(getters), return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        plural = getters.pop(task)
                        getters[asyncio.ensure_future(queues[plural].get())] = plural
                        event = task.result()
                        namespace = (event.object.get("metadata") or {}).get("namespace", "")
                        if not await _visible(request, plural, namespace):
                            continue
                        row = _light(run_summary(_with_kind(plural, event.object)))
                        yield ServerSentEvent(
                            data=json.dumps(row, default=str), event="deleted" if event.type == "DELETED" else "run"
                        )
            finally:
                for task in getters:
                    task.cancel()

    return EventSourceResponse(
        stream(), ping=svc.keepalive, ping_message_factory=KeepAlive, headers={"Cache-Control": "no-cache"}
    )


# -- writing (as the caller) ---------------------------------------------------------------------------


class DecisionIn(BaseModel):
    id: str = Field(min_length=1, max_length=253, description="The pending tool call's id.")
    approved: bool
    reason: str | None = Field(default=None, max_length=4096)


class DecisionsIn(BaseModel):
    decisions: list[DecisionIn] = Field(min_length=1, max_length=500)


async def _write(request: Request, field: str, call: Any) -> Any:
    try:
        return await call(writer_for(request, services(request).kube))
    except ApiException as exc:
        raise apiserver_refusal(exc, field) from exc


@router.post("/api/console/runs/{plural}/{namespace}/{name}/decisions")
async def decide(
    plural: str, namespace: str, name: str, body: DecisionsIn, request: Request, svc: ServicesDep
) -> dict[str, Any]:
    """Approve or deny pending calls as the caller; each decision carries the digest of the
    call that was pending (the call the person saw), so a different call is never run."""
    await _require(request, "patch", _ref(plural, namespace, name), namespace)
    obj = await svc.follower.get(plural, namespace, name)
    if obj is None:
        raise ClientError(404, "name", f"no {plural} {name!r} in namespace {namespace}")
    decided = (obj.get("spec") or {}).get("decisions") or {}
    pending = {
        p["toolCallId"]: p
        for p in (obj.get("status") or {}).get("pendingApprovals") or []
        if p["toolCallId"] not in decided
    }
    unknown = [d.id for d in body.decisions if d.id not in pending]
    if unknown:
        raise ClientError(
            400, "decisions", f"{', '.join(unknown)} not waiting for a decision ({len(pending)} call(s) are waiting)"
        )  # ids unnamed: not the caller's
    decisions = {
        d.id: {
            k: v
            for k, v in {
                "approved": d.approved,
                "reason": d.reason,
                "digest": pending[d.id].get("digest") or None,
            }.items()
            if v is not None
        }
        for d in body.decisions
    }
    path = resource_path(plural, namespace, name)
    await _write(request, "decisions", lambda writer: writer.patch(path, {"spec": {"decisions": decisions}}))
    return {"decided": decisions, "by": _user(request)}


class InvestigationIn(BaseModel):
    namespace: str | None = Field(default=None, max_length=63, pattern=NAMESPACE_PATTERN)
    title: str = Field(min_length=1, max_length=1024)
    description: str | None = Field(default=None, max_length=65536)
    question: str | None = Field(default=None, max_length=32768)
    subject: dict[str, str] | None = None
    model: str | None = Field(default=None, max_length=253)
    enable_tool_approval: bool = True


@router.post("/api/console/investigations")
async def start_investigation(body: InvestigationIn, request: Request, svc: ServicesDep) -> dict[str, Any]:
    namespace = body.namespace or svc.namespace
    await _require(request, "create", INVESTIGATION_PLURAL, namespace)
    spec = {
        k: v
        for k, v in {
            "title": body.title,
            "description": body.description or None,
            "question": body.question or None,
            "subject": body.subject or None,
            "model": check_model(svc.models, body.model or None),
            "enableToolApproval": body.enable_tool_approval,
        }.items()
        if v is not None
    }
    created = await _write(
        request,
        "body",
        lambda writer: writer.create(
            resource_path(INVESTIGATION_PLURAL, namespace),
            {
                "apiVersion": API_VERSION,
                "kind": INVESTIGATION_KIND,
                "metadata": {"generateName": "inv-", "annotations": requester_annotations(writer)},
                "spec": spec,
            },
        ),
    )
    return run_summary(_with_kind(INVESTIGATION_PLURAL, created))


class AskIn(BaseModel):
    ask: str = Field(min_length=1, max_length=32768)
    namespace: str | None = Field(default=None, max_length=63, pattern=NAMESPACE_PATTERN)
    model: str | None = Field(default=None, max_length=253)
    enable_tool_approval: bool = True


@router.post("/api/console/conversations")
async def start_conversation(body: AskIn, request: Request, svc: ServicesDep) -> dict[str, Any]:
    namespace = body.namespace or svc.namespace
    await _require(request, "create", CONVERSATION_PLURAL, namespace)
    spec: dict[str, Any] = {"turns": [{"ask": body.ask}], "enableToolApproval": body.enable_tool_approval}
    if body.model:
        spec["model"] = check_model(svc.models, body.model)
    created = await _write(
        request,
        "ask",
        lambda writer: writer.create(
            resource_path(CONVERSATION_PLURAL, namespace),
            {
                "apiVersion": API_VERSION,
                "kind": CONVERSATION_KIND,
                "metadata": {"generateName": "chat-", "annotations": requester_annotations(writer)},
                "spec": spec,
            },
        ),
    )
    return run_summary(_with_kind(CONVERSATION_PLURAL, created))


@router.post("/api/console/runs/conversations/{namespace}/{name}/turns")
async def ask_more(namespace: str, name: str, body: AskIn, request: Request, svc: ServicesDep) -> dict[str, Any]:
    """Another question in a Conversation, as the caller (optimistic concurrency: a turn asked
    meanwhile by someone else is kept)."""
    await _require(request, "patch", _ref(CONVERSATION_PLURAL, namespace, name), namespace)
    path = resource_path(CONVERSATION_PLURAL, namespace, name)
    for _ in range(5):
        obj = await svc.follower.get(CONVERSATION_PLURAL, namespace, name)
        if obj is None:
            raise ClientError(404, "name", f"no conversation {name!r} in namespace {namespace}")
        turns = list((obj.get("spec") or {}).get("turns") or [])
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"turns": [*turns, {"ask": body.ask}]},
        }
        try:
            await writer_for(request, svc.kube).patch(path, patch)
        except ApiException as exc:
            if exc.status == 409:
                continue
            raise apiserver_refusal(exc, "ask") from exc
        return {"turn": len(turns)}
    raise ClientError(409, "ask", "the conversation kept changing; ask again")
