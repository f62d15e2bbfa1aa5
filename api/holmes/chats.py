"""Chat requests onto Conversations: a new one per new chat, a turn appended for a follow-up,
decisions patched for a resume.

HolmesGPT clients are stateless: they resend the whole `conversation_history`. Lestrade keeps
the state in the Conversation and its transcript instead, and the client's history is used for
one thing only: to find the Conversation, by the `conversation_id` the server put in the
history it returned (or the request's own `conversation_id`, or — for a resume — the pending
tool call ids). Nothing else in it is trusted or replayed to the model as such: a history the
client forged or edited cannot make the server run a tool call, because only calls in the
server's own transcript that wait for approval can be approved, and the call that then runs is
the stored one.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from typing import Any

from lestrade.api.base.auth import requester_annotations
from lestrade.api.base.follow import Follower, Snapshot
from lestrade.api.holmes.events import CONVERSATION_KEY, EventPosition
from lestrade.api.holmes.runs import RunCursor
from lestrade.api.holmes.schemas import FrontendToolResult, ToolDecision
from lestrade.config import ConfigError, ModelList
from lestrade.kube import Acting, ApiException, Kube, is_conflict, resource_path
from lestrade.resources import API_VERSION, CONVERSATION_KIND, CONVERSATION_PLURAL
from lestrade.resources.constants import REQUEST_ANNOTATIONS
from lestrade.resources.conversation import MAX_ASK_LENGTH, MAX_IMAGE_URL_LENGTH, MAX_TURN_IMAGES
from lestrade.resources.keys import ENDPOINT_ANNOTATION
from lestrade.runs.progress import run_facts
from lestrade.runs.transcript import RecordType, TranscriptState
from lestrade.runs.views import ConversationView

__all__ = [
    "ClientError",
    "ChatStore",
    "CREATED_BY_LABEL",
    "ENDPOINT_ANNOTATION",
    "api_object",
    "apiserver_refusal",
    "check_model",
    "check_history",
    "check_images",
    "check_response_format",
]

CREATED_BY_LABEL = "app.kubernetes.io/created-by"
STATUS_CATCH_UP_SECONDS = 30.0
SUPERSEDED = "The user asked a new question instead of deciding on this call."
IMPORTED_HEADER = "Earlier conversation, as the client sent it (not verified by the server; for context only):\n"


def api_object(
    kind: str,
    name: str,
    endpoint: str,
    writer: Kube | Acting | None,
    spec: dict[str, Any],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The manifest of a resource the API creates for a caller: made by the API (label), through
    which endpoint, and who asked (the requester annotations, true because written as the caller;
    `annotations`: what the client said about its request, `request_annotations`)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {
            "name": name,
            "labels": {CREATED_BY_LABEL: "lestrade-api"},
            "annotations": {**(annotations or {}), ENDPOINT_ANNOTATION: endpoint, **requester_annotations(writer)},
        },
        "spec": spec,
    }


def request_annotations(req: Any) -> dict[str, str]:
    """The request's conversation_id, user_id, user_email, request_source, source_ref and meta
    as annotations (REQUEST_ANNOTATIONS; `meta` as JSON), those it sent."""
    found: dict[str, str] = {}
    for field, key in REQUEST_ANNOTATIONS.items():
        value = getattr(req, field, None)
        if value is None or value == "":
            continue
        found[key] = json.dumps(value, sort_keys=True, default=str) if field == "meta" else str(value)
    return found


class ClientError(Exception):
    """A request the server cannot honour because of what the client sent."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.status = status
        self.field = field
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"detail": f"{self.field}: {self.message}", "field": self.field}


def check_model(models: ModelList, name: str | None, field: str = "model") -> str | None:
    if name is None:
        return None
    try:
        models.get(name)
    except ConfigError:
        valid = ", ".join(sorted(models.models)) or "none"
        raise ClientError(400, field, f"unknown model {name!r}; valid models: {valid}") from None
    return name


def check_response_format(value: dict[str, Any] | None) -> None:
    """Reference 000's structured output: `json_schema` with a schema object, or `json_object`."""
    if value is None:
        return
    kind = value.get("type")
    if kind == "json_object":
        return
    if kind != "json_schema":
        raise ClientError(400, "response_format.type", f"must be json_schema or json_object, not {kind!r}")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise ClientError(400, "response_format.json_schema.schema", "a JSON schema object is required")
    if len(json.dumps(value)) > 65536:
        raise ClientError(400, "response_format", "larger than 64 KiB")


def check_images(images: list[Any] | None) -> list[dict[str, Any]] | None:
    """Reference 000's images (a URL or data URI string, or {url, detail, format}) as a turn's
    images; a turn keeps them in the Conversation, so each must stay small."""
    if not images:
        return None
    if len(images) > MAX_TURN_IMAGES:
        raise ClientError(400, "images", f"at most {MAX_TURN_IMAGES} images per question")
    found: list[dict[str, Any]] = []
    for index, image in enumerate(images):
        entry = (
            {"url": image}
            if isinstance(image, str)
            else {k: v for k, v in {"url": image.url, "detail": image.detail, "format": image.format}.items() if v}
        )
        if len(entry["url"]) > MAX_IMAGE_URL_LENGTH:
            raise ClientError(
                400,
                f"images[{index}]",
                f"longer than {MAX_IMAGE_URL_LENGTH} characters: send a URL the model can fetch "
                "(large data: URIs are not kept in a Conversation)",
            )
        if entry.get("format") and len(entry["format"]) > 64:
            raise ClientError(400, f"images[{index}].format", "at most 64 characters")
        found.append(entry)
    return found


def check_history(history: list[dict[str, Any]] | None) -> None:
    if history is None:
        return
    if not history:
        raise ClientError(400, "conversation_history", "must not be empty (omit it instead)")
    for index, message in enumerate(history):
        if not isinstance(message.get("role"), str):
            raise ClientError(400, f"conversation_history[{index}].role", "every message needs a role")
    if history[0].get("role") != "system":
        raise ClientError(
            400,
            "conversation_history",
            f"the first message must be a system message, not {history[0].get('role')!r}",
        )


def _history_conversation(history: list[dict[str, Any]] | None) -> str | None:
    if history and isinstance(history[0].get(CONVERSATION_KEY), str):
        return history[0][CONVERSATION_KEY]
    return None


def _imported(history: list[dict[str, Any]] | None, ask: str) -> str:
    """The ask of a new Conversation whose client sent an earlier history the server never
    issued: its user and assistant texts go along as quoted context (never as messages, so
    they cannot carry tool calls), shortened from the oldest end to fit one turn."""
    lines = [
        f"{m['role']}: {m['content']}"
        for m in (history or [])[1:]
        if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str) and m["content"]
    ]
    if not lines:
        return ask
    room = MAX_ASK_LENGTH - len(ask) - len(IMPORTED_HEADER) - 40
    context = "\n".join(lines)
    if room <= 0:
        return ask
    if len(context) > room:
        context = "…" + context[-(room - 1) :]
    return f"{IMPORTED_HEADER}{context}\n\nQuestion: {ask}"


@dataclass
class ChatStore:
    kube: Kube
    follower: Follower
    namespace: str

    def _path(self, name: str = "") -> str:
        return resource_path(CONVERSATION_PLURAL, self.namespace, name)

    # -- new chats --------------------------------------------------------------------------------

    async def create(
        self,
        ask: str,
        *,
        endpoint: str,
        model: str | None,
        approvals: bool,
        system_prompt: str | None = None,
        history: list[dict[str, Any]] | None = None,
        behavior_controls: dict[str, bool] | None = None,
        response_format: dict[str, Any] | None = None,
        frontend_tools: list[dict[str, Any]] | None = None,
        images: list[dict[str, Any]] | None = None,
        writer: Kube | Acting | None = None,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> RunCursor:
        name = f"chat-{secrets.token_hex(8)}"
        spec: dict[str, Any] = {
            "turns": [_turn(_imported(history, ask), images)],
            "enableToolApproval": approvals,
        }
        if behavior_controls:
            spec["behaviorControls"] = behavior_controls
        if response_format:
            spec["responseFormat"] = json.dumps(response_format)
        if frontend_tools:
            spec["frontendTools"] = _wire_tools(frontend_tools)
        if model:
            spec["model"] = model
        if system_prompt:
            spec["systemPrompt"] = system_prompt
        manifest = api_object(CONVERSATION_KIND, name, endpoint, writer, spec, annotations)
        manifest["metadata"]["labels"].update(labels or {})
        try:
            await (writer or self.kube).create(self._path(), manifest)
        except ApiException as exc:
            raise apiserver_refusal(exc, "body") from exc
        return RunCursor(CONVERSATION_PLURAL, self.namespace, name, turn=0)

    # -- follow-ups -------------------------------------------------------------------------------

    def target(
        self,
        conversation_id: str | None,
        history: list[dict[str, Any]] | None,
        watch_objects: dict[tuple[str, str], dict[str, Any]] | None = None,
    ) -> str | None:
        """The Conversation a request continues: named by conversation_id, or started by this
        client with that id (its `lestrade.dev/conversation-id`), or named in the history.
        An id nobody knows comes back as is (a decision for it is a 404; an ask starts a new
        Conversation recording it: `known`)."""
        if conversation_id and watch_objects is not None and (self.namespace, conversation_id) not in watch_objects:
            key = REQUEST_ANNOTATIONS["conversation_id"]
            for (namespace, name), obj in watch_objects.items():
                if (
                    namespace == self.namespace
                    and ((obj.get("metadata") or {}).get("annotations") or {}).get(key) == conversation_id
                ):
                    return name
        return conversation_id or _history_conversation(history)

    async def known(self, name: str) -> bool:
        return await self.follower.get(CONVERSATION_PLURAL, self.namespace, name) is not None

    async def ask(
        self,
        name: str,
        ask: str,
        *,
        field: str,
        model: str | None,
        approvals: bool,
        behavior_controls: dict[str, bool] | None = None,
        response_format: dict[str, Any] | None = None,
        frontend_tools: list[dict[str, Any]] | None = None,
        images: list[dict[str, Any]] | None = None,
        writer: Kube | Acting | None = None,
    ) -> RunCursor:
        """Appends a turn. Calls still waiting for approval are denied (the user moved on), so
        the earlier turn can finish and this one can start."""
        if await self.follower.get(CONVERSATION_PLURAL, self.namespace, name) is None:
            raise ClientError(404, field, f"no Conversation {name!r} in namespace {self.namespace}")
        try:
            async with asyncio.timeout(STATUS_CATCH_UP_SECONDS):
                async for snapshot in self.follower.snapshots((CONVERSATION_PLURAL, self.namespace, name)):
                    cursor = await self._try_ask(
                        name,
                        ask,
                        snapshot,
                        model=model,
                        approvals=approvals,
                        controls=behavior_controls,
                        response_format=response_format,
                        frontend_tools=frontend_tools,
                        images=images,
                        writer=writer,
                    )
                    if cursor is not None:
                        return cursor
        except TimeoutError:
            pass
        raise ClientError(409, field, f"Conversation {name!r} keeps changing; try again")

    async def _try_ask(
        self,
        name: str,
        ask: str,
        snapshot: Snapshot,
        *,
        model: str | None,
        approvals: bool,
        controls: dict[str, bool] | None,
        response_format: dict[str, Any] | None,
        frontend_tools: list[dict[str, Any]] | None,
        images: list[dict[str, Any]] | None,
        writer: Kube | Acting | None = None,
    ) -> RunCursor | None:
        obj = snapshot.object
        view = ConversationView(obj)
        waiting = _waiting(view, snapshot.transcript)
        if set(view.pending_ids) != set(waiting):
            return None  # status has not caught up with the transcript yet
        turns = list((obj.get("spec") or {}).get("turns") or [])
        spec: dict[str, Any] = {"turns": [*turns, _turn(ask, images)], "enableToolApproval": approvals}
        if model:
            spec["model"] = model
        # Each request's behavior_controls replace the last ones (a merge patch merges maps,
        # so keys the request leaves out are removed explicitly).
        old_controls = (obj.get("spec") or {}).get("behaviorControls") or {}
        spec["behaviorControls"] = {**{k: None for k in old_controls}, **(controls or {})} or None
        spec["responseFormat"] = json.dumps(response_format) if response_format else None
        # Clients send their frontend tools with every request; a request without them has none.
        spec["frontendTools"] = _wire_tools(frontend_tools) if frontend_tools else None
        undecided = [i for i in waiting if i not in view.decisions]
        if undecided:
            spec["decisions"] = {i: {"approved": False, "reason": SUPERSEDED} for i in undecided}
        patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": spec}
        try:
            await (writer or self.kube).patch(self._path(name), patch)
        except ApiException as exc:
            if is_conflict(exc):
                return None  # someone else asked or decided meanwhile: the next version says
            raise apiserver_refusal(exc, "ask") from exc
        return RunCursor(CONVERSATION_PLURAL, self.namespace, name, turn=len(turns))

    # -- resumes ----------------------------------------------------------------------------------

    async def _find_by_pending(self, ids: list[str], watch_objects: dict[tuple[str, str], dict[str, Any]]) -> str:
        holders = {
            key[1]
            for key, obj in watch_objects.items()
            if key[0] == self.namespace
            and set(ids) & {p.get("toolCallId") for p in (obj.get("status") or {}).get("pendingApprovals") or []}
        }
        if len(holders) != 1:
            raise ClientError(
                400,
                "conversation_history",
                "cannot tell which conversation these tool_decisions belong to: send the "
                "conversation_history (or conversation_id) a response returned",
            )
        return holders.pop()

    async def decide(
        self,
        name: str | None,
        decisions: list[ToolDecision],
        results: list[FrontendToolResult],
        watch_objects: dict[tuple[str, str], dict[str, Any]],
        writer: Kube | Acting | None = None,
    ) -> RunCursor:
        """Patches spec.decisions of the Conversation whose pending calls these are. Every id
        must be one the server's transcript holds as waiting, and every waiting call needs a
        decision; otherwise nothing is patched.

        The transcript says a call waits before status does (the operator stores the
        transcript first), and a client may answer `approval_required` at once: then this
        waits until status lists the calls too, as the operator and the admission policy
        accept decisions only for calls status lists."""
        ids = [d.tool_call_id for d in decisions] + [r.tool_call_id for r in results]
        if name is None:
            name = await self._find_by_pending(ids, watch_objects)
        if await self.follower.get(CONVERSATION_PLURAL, self.namespace, name) is None:
            raise ClientError(404, "conversation_id", f"no Conversation {name!r} in namespace {self.namespace}")
        try:
            async with asyncio.timeout(STATUS_CATCH_UP_SECONDS):
                async for snapshot in self.follower.snapshots((CONVERSATION_PLURAL, self.namespace, name)):
                    cursor = await self._try_decide(name, decisions, results, snapshot, writer)
                    if cursor is not None:
                        return cursor
        except TimeoutError:
            pass
        raise ClientError(409, "tool_decisions", f"Conversation {name!r} is not ready for decisions yet; try again")

    async def _try_decide(
        self,
        name: str,
        decisions: list[ToolDecision],
        results: list[FrontendToolResult],
        snapshot: Snapshot,
        writer: Kube | Acting | None = None,
    ) -> RunCursor | None:
        """Patches the decisions if this version of the object can take them; None to wait."""
        obj, state = snapshot.object, snapshot.transcript
        view = ConversationView(obj)
        turn = view.current_turn
        waiting = _waiting(view, state)
        ids = [d.tool_call_id for d in decisions] + [r.tool_call_id for r in results]
        field = "tool_decisions" if decisions else "frontend_tool_results"
        frontend = _frontend_waiting(view, state)
        wrong = [r.tool_call_id for r in results if r.tool_call_id in waiting and r.tool_call_id not in frontend]
        if wrong:
            raise ClientError(
                400,
                "frontend_tool_results",
                f"not frontend tool calls (decide them with tool_decisions): {', '.join(wrong)}",
            )
        unknown = [i for i in ids if i not in waiting]
        if unknown:
            raise ClientError(
                400,
                field,
                # The waiting ids are not named: they may be another user's calls.
                f"not waiting for approval in conversation {name}: {', '.join(map(json.dumps, unknown))}"
                + (f"; {len(waiting)} call(s) are waiting" if waiting else "; nothing is waiting"),
            )
        missing = [i for i in waiting if i not in ids]
        if missing:
            raise ClientError(400, field, f"decide every waiting call; {len(missing)} more are waiting")
        if set(view.pending_ids) != set(waiting):
            return None  # status has not caught up with the transcript yet
        digests = {p["toolCallId"]: p.get("digest") or "" for p in view.status.get("pendingApprovals") or []}
        forged = [d.tool_call_id for d in decisions if d.ticket is not None and d.ticket != digests[d.tool_call_id]]
        if forged:
            raise ClientError(
                400,
                "tool_decisions",
                f"ticket of {', '.join(map(json.dumps, forged))} does not match the call waiting "
                "under that id (a ticket is issued with pending_approvals for one exact call); "
                "nothing was decided",
            )
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {
                "decisions": {
                    **{
                        # bound to the stored call: the operator applies it to that call only
                        d.tool_call_id: {
                            "approved": d.approved,
                            **({"reason": d.reason} if d.reason else {}),
                            **({"digest": digests[d.tool_call_id]} if digests[d.tool_call_id] else {}),
                        }
                        for d in decisions
                    },
                    # A frontend call "runs" by returning the client's output: approved with it.
                    **{r.tool_call_id: {"approved": True} for r in results},
                }
            },
        }
        if results:
            patch["spec"]["frontendToolResults"] = {r.tool_call_id: r.result for r in results}
        try:
            await (writer or self.kube).patch(self._path(name), patch)
        except ApiException as exc:
            if is_conflict(exc):
                return None  # changed meanwhile: the next version says more
            raise apiserver_refusal(exc, field) from exc
        # Everything stored before the decisions was delivered with approval_required; the
        # stream goes on from the first record after them (even index -1 of it).
        return RunCursor(
            CONVERSATION_PLURAL,
            self.namespace,
            name,
            turn=turn,
            after=EventPosition(len(state.records), -1),
        )


def _waiting(view: ConversationView, state: TranscriptState) -> list[str]:
    """Ids of the calls of the current turn that wait for a decision, as the transcript says."""
    turn = view.current_turn
    since = state.turns.get(turn) if turn is not None else None
    return [] if since is None else [p.tool_call_id for p in run_facts(state, since).pending_approvals]


def _frontend_waiting(view: ConversationView, state: TranscriptState) -> set[str]:
    """Ids of waiting calls that belong to frontend tools (the client runs them)."""
    turn = view.current_turn
    since = state.turns.get(turn) if turn is not None else None
    if since is None:
        return set()
    return {
        p["toolCallId"]
        for record in state.records[since:]
        if record["t"] == RecordType.APPROVAL_NEEDED
        for p in record.get("pending") or []
        if p.get("frontend")
    }


def _turn(ask: str, images: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"ask": ask, **({"images": images} if images else {})}


def _wire_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Request frontend tools as spec.frontendTools entries (camelCase, unset fields left out)."""
    return [
        {
            k: v
            for k, v in {
                "name": t["name"],
                "description": t["description"],
                "parameters": t.get("parameters"),
                "mode": t.get("mode") or "pause",
                "noopResponse": t.get("noop_response"),
            }.items()
            if v is not None
        }
        for t in tools
    ]


def apiserver_refusal(exc: ApiException, field: str) -> Exception:
    """The apiserver refused the write (validation, admission policy): the client's doing."""
    if exc.status in (400, 403, 404, 422):
        try:
            message = json.loads(exc.body or "{}").get("message") or exc.reason
        except json.JSONDecodeError:
            message = exc.reason
        return ClientError(exc.status if exc.status != 422 else 400, field, str(message))
    return exc
