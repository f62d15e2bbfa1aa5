"""What Lestrade offers other agents (MCP, A2A), as plain async functions of the caller's
request: start an Investigation, ask a Conversation, follow a run to its end, read a run, list
runs, list the calls waiting for a person, search past findings.

Every read is shown only to a caller who may `get`/`list` that kind in that namespace, and
every write is reviewed (SubjectAccessReview) and then made *as the caller* (`writer_for`,
impersonation), exactly as the console and the HolmesGPT endpoints do; so RBAC, tenancy and
the admission policies decide for an agent as they do for kubectl. Approvals are not offered:
they stay with people (kubectl, the console, the API's decisions).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from lestrade.api.base.access import may
from lestrade.api.base.auth import writer_for
from lestrade.api.base.findings import Findings
from lestrade.api.base.follow import ResourceGone, Snapshot
from lestrade.api.holmes.chats import ChatStore, ClientError, api_object, apiserver_refusal, check_model
from lestrade.api.holmes.events import Event
from lestrade.api.holmes.runs import END_EVENTS, RunCursor, follow_run
from lestrade.api.holmes.services import Services, services
from lestrade.kube import ApiException, resource_path
from lestrade.resources import (
    CONVERSATION_KIND,
    CONVERSATION_PLURAL,
    GROUP,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
)
from lestrade.resources.common import FINISHED_PHASES
from lestrade.runs.history import MAX_RESULTS, SearchQuery, parse_since
from lestrade.runs.summary import is_finished, run_summary, timeline

__all__ = [
    "Refused",
    "RunRef",
    "PLURALS",
    "start_investigation",
    "ask",
    "follow",
    "run_details",
    "list_runs",
    "pending_approvals",
    "pending_of",
    "search_findings",
    "plural_of",
    "Progress",
]

PLURALS = {
    "investigation": INVESTIGATION_PLURAL,
    "investigations": INVESTIGATION_PLURAL,
    "inv": INVESTIGATION_PLURAL,
    "conversation": CONVERSATION_PLURAL,
    "conversations": CONVERSATION_PLURAL,
    "conv": CONVERSATION_PLURAL,
}
KINDS = {INVESTIGATION_PLURAL: INVESTIGATION_KIND, CONVERSATION_PLURAL: CONVERSATION_KIND}
OUTPUT_CHARS = 4000
"""Characters of one tool output a run's details carry (the transcript keeps all of it)."""
ENDPOINT = "/mcp"
STATUS_CATCH_UP_SECONDS = 30.0

Progress = Callable[[int, str], Awaitable[None]]


class Refused(Exception):
    """The caller may not do this, or asked for something that is not there: the message says
    what (and which Role to grant)."""


@dataclass(frozen=True)
class RunRef:
    plural: str
    namespace: str
    name: str
    turn: int | None = None

    @property
    def kind(self) -> str:
        return KINDS[self.plural]


def plural_of(kind: str | None) -> str:
    plural = PLURALS.get((kind or "investigation").strip().lower())
    if plural is None:
        raise Refused(f"kind must be investigation or conversation, not {kind!r}")
    return plural


async def _require(request: Request, verb: str, plural: str, namespace: str) -> None:
    if not await may(request, verb, plural, namespace):
        who = getattr(request.state, "user", None) or "you"
        raise Refused(
            f"{who} may not {verb} {plural}.{GROUP} in namespace {namespace}; grant it with a Role/RoleBinding"
        )


def _namespace(svc: Services, namespace: str | None) -> str:
    return (namespace or "").strip() or svc.namespace


def _client_error(exc: ClientError) -> Refused:
    return Refused(exc.message if exc.field in ("authorization",) else f"{exc.field}: {exc.message}")


async def start_investigation(
    request: Request,
    *,
    title: str,
    description: str | None = None,
    question: str | None = None,
    subject: dict[str, Any] | None = None,
    namespace: str | None = None,
    model: str | None = None,
    source: str | None = None,
    enable_tool_approval: bool = True,
) -> RunRef:
    svc = services(request)
    namespace = _namespace(svc, namespace)
    await _require(request, "create", INVESTIGATION_PLURAL, namespace)
    try:
        spec = {
            k: v
            for k, v in {
                "title": title,
                "description": description or None,
                "question": question or None,
                "subject": subject or None,
                "source": source or None,
                "model": check_model(svc.models, model or None),
                "enableToolApproval": enable_tool_approval,
            }.items()
            if v is not None
        }
    except ClientError as exc:
        raise _client_error(exc) from None
    name = f"mcp-{secrets.token_hex(6)}"
    writer = writer_for(request, svc.kube)
    try:
        await writer.create(
            resource_path(INVESTIGATION_PLURAL, namespace), api_object(INVESTIGATION_KIND, name, ENDPOINT, writer, spec)
        )
    except ApiException as exc:
        raise Refused(str(apiserver_refusal(exc, "investigation"))) from exc
    return RunRef(INVESTIGATION_PLURAL, namespace, name)


async def ask(
    request: Request,
    *,
    question: str,
    conversation: str | None = None,
    namespace: str | None = None,
    model: str | None = None,
    enable_tool_approval: bool = True,
    labels: dict[str, str] | None = None,
    endpoint: str = ENDPOINT,
) -> RunRef:
    """A new Conversation (with `labels`), or a new turn of the Conversation named `conversation`."""
    svc = services(request)
    namespace = _namespace(svc, namespace)
    store = ChatStore(svc.kube, svc.follower, namespace)
    writer = writer_for(request, svc.kube)
    try:
        checked = check_model(svc.models, model or None)
        if conversation:
            await _require(request, "patch", CONVERSATION_PLURAL, namespace)
            cursor = await store.ask(
                conversation,
                question,
                field="conversation",
                model=checked,
                approvals=enable_tool_approval,
                writer=writer,
            )
        else:
            await _require(request, "create", CONVERSATION_PLURAL, namespace)
            cursor = await store.create(
                question, endpoint=endpoint, model=checked, approvals=enable_tool_approval, writer=writer, labels=labels
            )
    except ClientError as exc:
        raise _client_error(exc) from None
    return RunRef(CONVERSATION_PLURAL, namespace, cursor.name, cursor.turn)


def describe(event: Event) -> str:
    """One line a person (or an agent) reads about a step of the run."""
    data = event.data
    if event.name == "start_tool_calling":
        return f"calling {data.get('tool_name')}: {data.get('description') or ''}".strip()
    if event.name == "tool_calling_result":
        return f"{data.get('name')}: {(data.get('result') or {}).get('status')}"
    if event.name == "ai_message":
        return "thinking"
    if event.name == "approval_required":
        return "waiting for a person to approve a call"
    if event.name == "ai_answer_end":
        return "answered"
    if event.name == "error":
        return f"failed: {data.get('msg') or ''}"
    return event.name


async def follow(request: Request, ref: RunRef, progress: Progress | None = None) -> None:
    """Waits until the run (turn) answers, fails or pauses for approval, telling `progress`
    each step; gives up after the API's wait timeout (the run goes on)."""
    svc = services(request)
    cursor = RunCursor(ref.plural, ref.namespace, ref.name, ref.turn)
    steps = 0

    async def run() -> None:
        nonlocal steps
        async for event, _ in follow_run(svc.follower, cursor):
            steps += 1
            if progress is not None:
                await progress(steps, describe(event))
            if event.name in END_EVENTS:
                return

    async def settled() -> None:
        """The operator writes the transcript before status: wait until status says it too."""
        async for snapshot in svc.follower.snapshots((ref.plural, ref.namespace, ref.name)):
            obj = {"kind": ref.kind, **snapshot.object}
            if pending_of(obj) or _ended(obj, ref.turn):
                return

    try:
        await asyncio.wait_for(run(), svc.wait_timeout)
        with contextlib.suppress(TimeoutError):  # then status says what it says
            await asyncio.wait_for(settled(), STATUS_CATCH_UP_SECONDS)
    except ResourceGone as exc:
        raise Refused(str(exc)) from None
    except TimeoutError:
        raise Refused(
            f"{ref.kind} {ref.name} is still running after {svc.wait_timeout:.0f} s; read it later with get_run"
        ) from None


def _ended(obj: dict[str, Any], turn: int | None) -> bool:
    if turn is None:
        return is_finished(obj)
    turns = (obj.get("status") or {}).get("turns") or []
    return turn < len(turns) and turns[turn].get("phase") in FINISHED_PHASES


def _calls(snapshot: Snapshot, since: int) -> list[dict[str, Any]]:
    return [
        {
            "id": item["id"],
            "name": item["name"],
            "status": item["status"],
            "description": item["description"],
            "params": item["params"],
            "output": (item["output"] or "")[:OUTPUT_CHARS],
        }
        for item in timeline(snapshot.transcript, since)
        if item["kind"] == "tool_call"
    ]


async def run_details(request: Request, ref: RunRef, *, tool_calls: bool = True) -> dict[str, Any]:
    """The run as its reader needs it: summary (phase, cost), answer or analysis and sections,
    the tool calls with their outputs, and the calls waiting for a person (with the command
    that approves one)."""
    svc = services(request)
    await _require(request, "get", ref.plural, ref.namespace)
    obj = await svc.follower.get(ref.plural, ref.namespace, ref.name)
    if obj is None:
        raise Refused(f"no {ref.plural} {ref.name!r} in namespace {ref.namespace}")
    obj = {"kind": ref.kind, **obj}
    summary = run_summary(obj)
    details: dict[str, Any] = {
        k: summary[k]
        for k in (
            "kind",
            "namespace",
            "name",
            "title",
            "phase",
            "finished",
            "message",
            "model",
            "steps",
            "toolCallCount",
            "usage",
            "created",
        )
    }
    details["answer"] = summary["answer"]
    if ref.plural == INVESTIGATION_PLURAL:
        details["sections"] = summary["sections"]
    else:
        turns = (obj.get("status") or {}).get("turns") or []
        details["turns"] = [
            {
                "ask": a.get("ask"),
                "phase": (turns[i] if i < len(turns) else {}).get("phase"),
                "answer": (turns[i] if i < len(turns) else {}).get("answer"),
            }
            for i, a in enumerate((obj.get("spec") or {}).get("turns") or [])
        ]
    details["pendingApprovals"] = pending_of(obj)
    if tool_calls:
        state = await svc.follower.transcript(obj)
        details["toolCalls"] = _calls(Snapshot(obj, state), 0)
    return details


def pending_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj.get("metadata") or {}
    decided = (obj.get("spec") or {}).get("decisions") or {}
    short = "inv" if obj.get("kind") == INVESTIGATION_KIND else "conv"
    return [
        {
            "toolCallId": p.get("toolCallId"),
            "toolName": p.get("toolName"),
            "description": p.get("description"),
            "params": p.get("params"),
            "approveWith": (
                f"kubectl -n {meta.get('namespace')} patch {short} {meta.get('name')} --type merge "
                f'-p \'{{"spec":{{"decisions":{{"{p.get("toolCallId")}":{{"approved":true}}}}}}}}\''
            ),
        }
        for p in (obj.get("status") or {}).get("pendingApprovals") or []
        if p.get("toolCallId") not in decided
    ]


async def _visible(request: Request, plurals: list[str], namespace: str | None) -> AsyncIterator[dict[str, Any]]:
    svc = services(request)
    for plural in plurals:
        objects = [
            o
            for o in list(svc.watches[plural].objects.values())
            if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace
        ]
        namespaces = {(o.get("metadata") or {}).get("namespace", "") for o in objects}
        allowed = {ns for ns in namespaces if await may(request, "list", plural, ns)}
        for obj in objects:
            if (obj.get("metadata") or {}).get("namespace", "") in allowed:
                yield {"kind": KINDS[plural], **obj}


async def list_runs(
    request: Request,
    *,
    namespace: str | None = None,
    kind: str | None = None,
    phase: str | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """The caller's visible runs, newest first."""
    plurals = [plural_of(kind)] if kind else [INVESTIGATION_PLURAL, CONVERSATION_PLURAL]
    if namespace:
        for plural in plurals:
            await _require(request, "list", plural, namespace)
    rows = []
    async for obj in _visible(request, plurals, namespace or None):
        summary = run_summary(obj)
        if phase and summary["phase"].lower() != phase.lower():
            continue
        rows.append(
            {
                k: summary[k]
                for k in ("kind", "namespace", "name", "title", "phase", "finished", "created", "steps", "usage")
            }
            | {"waiting": len(summary["pendingApprovals"])}
        )
    rows.sort(key=lambda r: r["created"] or "", reverse=True)
    return rows[: max(1, min(limit, 200))]


async def pending_approvals(request: Request, *, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every call waiting for a person, in runs the caller may read (read-only)."""
    if namespace:
        for plural in (INVESTIGATION_PLURAL, CONVERSATION_PLURAL):
            await _require(request, "list", plural, namespace)
    found = []
    async for obj in _visible(request, [INVESTIGATION_PLURAL, CONVERSATION_PLURAL], namespace or None):
        if is_finished(obj):
            continue
        meta = obj.get("metadata") or {}
        for pending in pending_of(obj):
            found.append({"kind": obj["kind"], "namespace": meta.get("namespace"), "name": meta.get("name"), **pending})
    return found


async def search_findings(
    request: Request,
    *,
    query: str = "",
    namespace: str | None = None,
    kind: str | None = None,
    name: str | None = None,
    alert: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int = 10,
) -> list[dict[str, Any]]:
    """Past findings the caller may read (lestrade.runs.history), best first."""
    try:
        search = SearchQuery(
            text=query or "",
            namespace=namespace or None,
            kind=kind or None,
            name=name or None,
            alert=alert or None,
            since=parse_since(since),
            until=parse_since(until),
            limit=max(1, min(int(limit), MAX_RESULTS)),
        )
    except ValueError as exc:
        raise Refused(f"since/until: {exc}") from None
    findings: Findings = request.app.state.findings
    return await findings.search(request.app, getattr(request.state, "verdict", None), search)


def finished_refs(rows: list[dict[str, Any]]) -> list[RunRef]:
    return [RunRef(plural_of(r["kind"]), r["namespace"], r["name"]) for r in rows if r["finished"]]
