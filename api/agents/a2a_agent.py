"""Lestrade as an A2A agent: the agent card at `/.well-known/agent-card.json` (public: it holds
no data) and the JSON-RPC endpoint at `/a2a` (A2A 1.0's SendMessage, SendStreamingMessage,
GetTask, CancelTask, and 0.3's message/send, message/stream, tasks/get, tasks/cancel), behind
the API's authentication. Built on the protocol's own SDK (`a2a-sdk`).

A task is one turn of a Conversation, asked as the caller; an A2A context is one Conversation
(labelled with the context id, so a later message of the same context — on any replica — asks
the same Conversation again). While the turn runs the task is `working` (a status message per
tool call); it ends `completed` with the answer as an artifact, `failed` with the reason, or
`input-required` while a call waits for a person's approval (approvals stay with people:
kubectl, the console, the API); a message to that task later picks it up again. `rejected`:
the caller may not do this (RBAC), the message says what to grant. Cancelling a task stops
following it; the turn itself goes on, as with an HTTP client that hangs up.

The tasks' own records (the SDK's task store) are per API process and per caller (the SDK's
owner scope is the authenticated user): a GetTask on another replica does not know the task,
while the Conversation, which holds everything the task said, is visible on all of them.
Message metadata `namespace` and `model` choose where and with which model.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from google.protobuf.json_format import MessageToDict
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, Router
from starlette.types import ASGIApp

from lestrade.api.agents import runs
from lestrade.api.agents.runs import Refused, RunRef
from lestrade.api.base.follow import ResourceGone
from lestrade.api.holmes.services import services
from lestrade.resources import CONVERSATION_PLURAL
from lestrade.resources.keys import A2A_CONTEXT_LABEL as CONTEXT_LABEL
from lestrade.resources.tenancy import REQUESTED_BY_ANNOTATION

__all__ = ["build_a2a_app", "PATH", "CARD_PATH", "CONTEXT_LABEL"]

PATH = "/a2a"
CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
MAX_TASKS = 10_000
"""Tasks whose turn this process remembers, to pick one up again after input-required."""
FINISHED_TURN = frozenset({"Answered", "Succeeded", "Failed"})


class Caller(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return bool(self._name)

    @property
    def user_name(self) -> str:
        return self._name


class CallContexts(DefaultServerCallContextBuilder):
    """The SDK's call context (headers: the protocol version, extensions) with the HTTP request
    (whose state the auth middleware filled: every write goes as that caller) and the caller as
    the owner of its tasks."""

    def build(self, request: Request) -> ServerCallContext:  # type: ignore[override]
        context = super().build(request)
        context.state["request"] = request
        context.user = Caller(getattr(request.state, "user", None) or "anonymous")
        return context

    def build_user(self, request: Request) -> User:  # type: ignore[override]
        return Caller(getattr(request.state, "user", None) or "anonymous")


def _request(context: RequestContext) -> Request:
    return context.call_context.state["request"]  # type: ignore[no-any-return]


def _metadata(context: RequestContext) -> dict[str, Any]:
    message = context.message
    found: dict[str, Any] = {}
    if message is not None and message.HasField("metadata"):
        found.update(MessageToDict(message.metadata))
    found.update(context.metadata or {})
    return found


def _label(context_id: str) -> str:
    """A context id as a label value (the SDK's are UUIDs; anything else is hashed)."""
    if re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", context_id):
        return context_id
    return "sha256-" + hashlib.sha256(context_id.encode()).hexdigest()[:56]


def _turn_of(obj: dict[str, Any], turn: int) -> dict[str, Any]:
    turns = (obj.get("status") or {}).get("turns") or []
    return turns[turn] if turn < len(turns) else {}


class ConversationAgent(AgentExecutor):
    def __init__(self) -> None:
        self._turns: dict[str, RunRef] = {}  # task id -> its turn, for a task picked up again

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(
                    task_id,
                    context_id,
                    TaskState.TASK_STATE_SUBMITTED,
                    history=[context.message] if context.message else [],
                )
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        request = _request(context)
        try:
            ref = self._turns.get(task_id) or await self._ask(request, context, context_id)
            self._turns[task_id] = ref
            while len(self._turns) > MAX_TASKS:  # the oldest tasks first (dicts keep insertion order)
                self._turns.pop(next(iter(self._turns)))
            await updater.start_work(
                new_text_message(
                    f"asked conversation {ref.namespace}/{ref.name}, turn {ref.turn}",
                    context_id=context_id,
                    task_id=task_id,
                )
            )
            await self._follow(request, ref, updater)
        except Refused as exc:
            await updater.reject(new_text_message(str(exc), context_id=context_id, task_id=task_id))

    async def _ask(self, request: Request, context: RequestContext, context_id: str) -> RunRef:
        question = context.get_user_input().strip()
        if not question:
            raise Refused("the message has no text to ask")
        meta = _metadata(context)
        namespace = str(meta.get("namespace") or "") or None
        existing = self._conversation(request, context_id, namespace)
        return await runs.ask(
            request,
            question=question,
            conversation=existing,
            namespace=namespace,
            model=str(meta.get("model") or "") or None,
            endpoint=PATH,
            labels={CONTEXT_LABEL: _label(context_id)},
        )

    def _conversation(self, request: Request, context_id: str, namespace: str | None) -> str | None:
        """The Conversation of this A2A context, if the caller made one for it (on any replica).
        Only the caller's own: a label anyone may write must not send their question elsewhere."""
        svc = services(request)
        namespace = namespace or svc.namespace
        verdict = getattr(request.state, "verdict", None)
        caller = verdict.user if verdict is not None and not verdict.api_key and verdict.subject else None
        for (ns, name), obj in list(svc.watches[CONVERSATION_PLURAL].objects.items()):
            meta = obj.get("metadata") or {}
            if ns != namespace or (meta.get("labels") or {}).get(CONTEXT_LABEL) != _label(context_id):
                continue
            if caller is None or (meta.get("annotations") or {}).get(REQUESTED_BY_ANNOTATION) == caller:
                return name
        return None

    async def _follow(self, request: Request, ref: RunRef, updater: TaskUpdater) -> None:
        """Status updates until the turn answers, fails or waits for a person."""
        svc = services(request)
        told: set[str] = set()
        turn = ref.turn or 0

        def say(text: str) -> Any:
            return new_text_message(text, context_id=updater.context_id, task_id=updater.task_id)

        try:
            async with asyncio.timeout(svc.wait_timeout):
                async for snapshot in svc.follower.snapshots((ref.plural, ref.namespace, ref.name)):
                    obj = snapshot.object
                    status = _turn_of(obj, turn)
                    for call in status.get("toolCalls") or (obj.get("status") or {}).get("toolCalls") or []:
                        if call.get("id") not in told and len((obj.get("status") or {}).get("turns") or []) > turn:
                            told.add(str(call.get("id")))
                            await updater.update_status(
                                TaskState.TASK_STATE_WORKING,
                                say(f"calling {call.get('name')}: {call.get('description') or ''}"),
                            )
                    phase = status.get("phase")
                    if phase in FINISHED_TURN:
                        if status.get("answer"):
                            await updater.add_artifact([new_text_part(str(status["answer"]))], name="answer")
                            await updater.complete(say(str(status["answer"])))
                        else:
                            await updater.failed(say(str(status.get("message") or "the turn failed")))
                        return
                    if phase == "AwaitingApproval":
                        waiting = runs.pending_of(obj)
                        if waiting:
                            lines = [
                                f"- {p['toolName']}: {p['description']} — a person approves with: {p['approveWith']}"
                                for p in waiting
                            ]
                            await updater.requires_input(
                                say(
                                    "Waiting for a person to approve (approvals stay with people):\n" + "\n".join(lines)
                                )
                            )
                            return
        except TimeoutError:
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                say(f"still running after {svc.wait_timeout:.0f} s; ask again to follow it"),
            )
        except ResourceGone as exc:
            await updater.failed(say(str(exc)))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel(
            new_text_message(
                "stopped following; the turn itself goes on", context_id=context.context_id, task_id=context.task_id
            )
        )


def _card() -> AgentCard:
    return AgentCard(
        name="Lestrade",
        description="Kubernetes troubleshooting: investigates a problem in the cluster with read-only tools, "
        "as the caller may read it; changes wait for a person's approval.",
        version="0.1.0",
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[AgentInterface(url=PATH, protocol_binding="JSONRPC", protocol_version="1.0")],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="troubleshoot",
                name="Troubleshoot Kubernetes",
                description="Answers questions about what is wrong in the cluster and why, citing what it read; "
                "continue in the same context to ask more.",
                tags=["kubernetes", "troubleshooting", "root cause"],
                examples=["Why does deployment web in namespace shop keep restarting?"],
            )
        ],
    )


def build_a2a_app() -> ASGIApp:
    """The JSON-RPC endpoint and the agent card, as one router (`lazy.py` mounts it)."""
    card = _card()
    handler = DefaultRequestHandlerV2(
        agent_executor=ConversationAgent(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_jsonrpc_routes(handler, PATH, context_builder=CallContexts(), enable_v0_3_compat=True)

    async def agent_card(request: Request) -> JSONResponse:
        """The card, with the JSON-RPC endpoint's URL as this request reached the API."""
        served = AgentCard()
        served.CopyFrom(card)
        del served.supported_interfaces[:]
        served.supported_interfaces.append(
            AgentInterface(
                url=str(request.base_url).rstrip("/") + PATH, protocol_binding="JSONRPC", protocol_version="1.0"
            )
        )
        return JSONResponse(agent_card_to_dict(served))

    return Router(routes=[*routes, Route(CARD_PATH, agent_card, methods=["GET"])])
