"""One attempt at running an Investigation: from its transcript to the end or to a pause.

The same code runs inside the operator (one asyncio task per Investigation) and inside a Job's
pod (`python -m lestrade.operator.job`), so it knows nothing about Kopf. It is resumable by
construction: it always starts from what the transcript holds, and it writes to the transcript
before anything irreversible happens:

- the model's answer (the assistant message) and the intent to run each tool call are stored
  before the tool runs, so a restart neither asks the model again for a turn it already took
  nor runs a tool call that may already have had its effect (the engine reports such a call to
  the model as "outcome unknown");
- the decisions the run acts on are stored before the approved calls run, so the call that
  runs is always the stored one, exactly as the model asked;
- status milestones are written only after the transcript they describe is stored.

Everything else (status progress, Events) is best-effort and coalesced.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from kubernetes import client as k8s
from pydantic import ValidationError

from lestrade.config import ConfigError, ModelList
from lestrade.operator.agent import events as ev
from lestrade.operator.agent.answer import format_answer
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.loop import Agent
from lestrade.operator.agent.prompts import DEFAULT_SECTIONS, InvestigationRequest, PromptConfig
from lestrade.operator.tools.base import ToolRegistry
from lestrade.resources.constants import (
    API_VERSION,
    CONDITION_AWAITING_APPROVAL,
    CONDITION_SUCCEEDED,
    INVESTIGATION_KIND,
)
from lestrade.resources.investigation import InvestigationSpec

from .kube import Kube, investigation_path
from .recorder import EventRecorder
from .settings import OperatorSettings
from .status import StatusWriter, now_iso, parse_time
from .transcript import Transcript

__all__ = [
    "Outcome",
    "Engine",
    "InvestigationRef",
    "run_investigation",
    "pending_decisions",
    "deadline_of",
    "timeout_of",
    "fail",
]

logger = logging.getLogger(__name__)

STATUS_TOOL_CALLS = 50
"""Tool calls listed in status (the newest); the transcript has all of them."""
MAX_ANALYSIS_CHARS = 64 * 1024
MAX_PARAM_CHARS = 2048


class Outcome(StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    AWAITING_APPROVAL = "AwaitingApproval"


ToolsFactory = Callable[[k8s.ApiClient], ToolRegistry]


@dataclass
class Engine:
    """What every run shares: API access, settings, models and the tool registry factory."""

    kube: Kube
    api_client: k8s.ApiClient
    settings: OperatorSettings
    models: ModelList
    tools: ToolsFactory
    component: str = "lestrade-operator"
    applied_decisions: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """uid -> decisions already acted upon (from the transcript); used to judge new ones."""
    owns_client: bool = False
    active_runs: int = 0
    """Runs in progress in this process (what the status interval stretches with)."""

    def status_interval(self) -> float:
        """Seconds between progress patches of one run: the configured interval, longer when
        so many runs are active that together they would exceed the patch budget."""
        budget = self.settings.status_patches_per_second
        return max(self.settings.status_interval, self.active_runs / budget)

    async def aclose(self) -> None:
        await self.kube.aclose()
        if self.owns_client:
            self.api_client.close()


@dataclass(frozen=True)
class InvestigationRef:
    namespace: str
    name: str
    uid: str
    generation: int | None = None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> InvestigationRef:
        meta = body["metadata"]
        return cls(meta["namespace"], meta["name"], meta["uid"], meta.get("generation"))

    @property
    def path(self) -> str:
        return investigation_path(self.namespace, self.name)

    @property
    def owner(self) -> dict[str, str]:
        return {"apiVersion": API_VERSION, "kind": INVESTIGATION_KIND, "name": self.name, "uid": self.uid}

    @property
    def involved(self) -> dict[str, str]:
        return {**self.owner, "namespace": self.namespace}


def deadline_of(body: Mapping[str, Any], settings: OperatorSettings) -> float | None:
    """Unix time when the run times out (startTime + timeout), or None before it started."""
    started = parse_time((body.get("status") or {}).get("startTime"))
    if started is None:
        return None
    return started.timestamp() + timeout_of(body, settings)


def timeout_of(body: Mapping[str, Any], settings: OperatorSettings) -> float:
    """spec.timeout in seconds, or the operator's default."""
    try:
        seconds = InvestigationSpec.model_validate(body.get("spec") or {}).timeout_seconds()
    except ValidationError:
        seconds = None
    return seconds or settings.default_timeout


def pending_decisions(body: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(decided, undecided) ids of status.pendingApprovals according to spec.decisions."""
    pending = [p["toolCallId"] for p in (body.get("status") or {}).get("pendingApprovals") or []]
    decisions = (body.get("spec") or {}).get("decisions") or {}
    decided = [i for i in pending if isinstance(decisions.get(i), dict) and "approved" in decisions[i]]
    return decided, [i for i in pending if i not in decided]


def _short_params(params: Mapping[str, Any]) -> dict[str, Any]:
    text = json.dumps(params, default=str)
    if len(text) <= MAX_PARAM_CHARS:
        return dict(params)
    return {"truncated": text[:MAX_PARAM_CHARS]}


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + "\n\n…(truncated in status; the transcript has the full text)"


async def fail(
    writer: StatusWriter,
    recorder: EventRecorder,
    reason: str,
    message: str,
) -> Outcome:
    """Marks the run Failed (status milestone + Warning Event)."""
    writer.set_condition(CONDITION_SUCCEEDED, False, reason, message)
    if writer.condition_status(CONDITION_AWAITING_APPROVAL) == "True":
        writer.set_condition(CONDITION_AWAITING_APPROVAL, False, reason, message)
    await writer.milestone(
        phase=Outcome.FAILED.value,
        message=message,
        pendingApprovals=[],
        completionTime=now_iso(),
    )
    recorder.post(reason, message, "Warning")
    return Outcome.FAILED


class _Run:
    """The state of one attempt; see `run_investigation`."""

    def __init__(self, engine: Engine, body: Mapping[str, Any]) -> None:
        self.engine = engine
        self.body = body
        self.ref = InvestigationRef.of(body)
        self.status = dict(body.get("status") or {})
        self.writer = StatusWriter(
            engine.kube,
            self.ref.path,
            self.status,
            interval=engine.status_interval,
            generation=self.ref.generation,
        )
        self.recorder = EventRecorder(engine.kube, self.ref.involved, engine.component)
        self.transcript = Transcript(
            engine.kube, self.ref.namespace, self.ref.owner, chunk_limit=engine.settings.chunk_limit
        )
        self.tool_calls: list[dict[str, Any]] = list(self.status.get("toolCalls") or [])
        self.tool_call_count = int(self.status.get("toolCallCount") or 0)
        usage = self.status.get("usage") or {}
        self.usage = {
            "promptTokens": int(usage.get("promptTokens") or 0),
            "completionTokens": int(usage.get("completionTokens") or 0),
            "totalTokens": int(usage.get("totalTokens") or 0),
            "cost": float(usage.get("cost") or 0.0),
        }
        self.steps = int(self.status.get("steps") or 0)
        self.demo = False
        self.timeout = engine.settings.default_timeout
        self._running_stored = False

    # -- small status helpers ------------------------------------------------------------------

    def _progress(self, message: str) -> None:
        if self.demo:
            message = f"{message} [demo model]"
        self.writer.set(message=message)

    def _track_tool(self, entry: dict[str, Any]) -> None:
        for i, existing in enumerate(self.tool_calls):
            if existing.get("id") == entry["id"]:
                self.tool_calls[i] = {**existing, **entry}
                break
        else:
            self.tool_calls.append(entry)
            self.tool_calls = self.tool_calls[-STATUS_TOOL_CALLS:]
        self.writer.set(toolCalls=list(self.tool_calls), toolCallCount=self.tool_call_count)

    # -- the attempt ---------------------------------------------------------------------------

    async def run(self) -> Outcome:
        try:
            return await self._run()
        finally:
            await self.writer.close()

    async def _run(self) -> Outcome:
        settings = self.engine.settings
        try:
            spec = InvestigationSpec.model_validate(self.body.get("spec") or {})
        except ValidationError as exc:
            return await fail(self.writer, self.recorder, "InvalidSpec", f"invalid spec: {exc}")
        try:
            model = self.engine.models.get(spec.model)
        except ConfigError as exc:
            return await fail(self.writer, self.recorder, "InvalidModel", str(exc))
        self.demo = model.is_demo

        resumed = bool(self.status.get("startTime"))
        start_time = self.status.get("startTime") or now_iso()
        timeout = self.timeout = spec.timeout_seconds() or settings.default_timeout
        deadline = (parse_time(start_time) or datetime.now(UTC)).timestamp() + timeout
        if time.time() >= deadline:
            return await self._timed_out(timeout)

        # Before the first run nothing but the opening messages can be stored (every other
        # transcript write waits until startTime is in status, see `_sync`), so only a resumed
        # run needs to read the transcript.
        state = await self.transcript.load() if resumed else self.transcript.state
        last = state.messages[-1] if state.messages else None
        if last and last.get("role") == "assistant" and not last.get("tool_calls"):
            # The run answered, then stopped before status said so: finish from the stored
            # answer instead of asking the model for another one.
            self._running_stored = True
            text, sections = format_answer(
                str(last.get("content") or ""), list(spec.sections or DEFAULT_SECTIONS)
            )
            return await self._succeed(ev.Answer(text=text, sections=sections))

        registry = self.engine.tools(self.engine.api_client)
        agent = Agent(
            model=model,
            tools=registry,
            prompt=PromptConfig(
                sections=spec.sections or DEFAULT_SECTIONS,
                cluster_name=settings.cluster_name,
            ),
            # The engine stops model calls and tools at the deadline and says so; the
            # operator's own timeout below is the backstop for everything else.
            limits=Limits(
                max_steps=spec.max_steps or settings.default_max_steps,
                timeout=max(1.0, deadline - time.time()),
            ),
            enable_tool_approval=spec.enable_tool_approval,
        )
        if not state.messages:
            request = InvestigationRequest(
                title=spec.title,
                description=spec.description or "",
                source=spec.source,
                subject=spec.subject or {},
                context=spec.context or {},
                question=spec.question,
            )
            for message in agent.initial_messages(request):
                self.transcript.append_message(message)

        # Decisions: those acted upon before, plus the new ones for the calls that wait.
        decided, undecided = pending_decisions(self.body)
        if undecided:
            raise RuntimeError(f"run started while decisions are missing for {undecided}")
        spec_decisions = (self.body.get("spec") or {}).get("decisions") or {}
        for call_id in decided:
            if call_id not in state.decisions:
                decision = spec_decisions[call_id]
                self.transcript.append_decision(
                    call_id, bool(decision["approved"]), decision.get("reason")
                )
        # Stored in the background: nothing irreversible happens before the next `sync()`,
        # which a tool call's intent forces (and which writes these records first, in order).
        self.transcript.flush_soon()
        self.engine.applied_decisions[self.ref.uid] = dict(state.decisions)
        decisions = {
            call_id: (bool(d["approved"]), d.get("reason")) for call_id, d in state.decisions.items()
        }

        # Running.
        verb = "Resumed" if resumed else "Started"
        what = f"model {model.name}" + (" (built-in demo model: scripted, not an AI)" if self.demo else "")
        if decided:
            approved = sum(1 for i in decided if state.decisions[i]["approved"])
            note = f"{verb} after decisions: {approved} approved, {len(decided) - approved} denied"
        else:
            note = f"{verb} investigating with {what}"
        self.writer.set_condition(CONDITION_SUCCEEDED, "Unknown", "Running", note)
        if self.writer.condition_status(CONDITION_AWAITING_APPROVAL) == "True":
            self.writer.set_condition(CONDITION_AWAITING_APPROVAL, False, "Decided", note)
        self.writer.send_soon(
            phase="Running",
            startTime=start_time,
            model=model.name,
            message=note,
            pendingApprovals=[],
            transcript=self.transcript.reference(),
        )
        self.recorder.post(verb, note)

        messages = state.working_messages()
        try:
            async with asyncio.timeout_at(
                asyncio.get_running_loop().time() + max(0.0, deadline - time.time()) + 5.0
            ):
                return await self._drive(agent, messages, decisions, frozenset(state.started))
        except TimeoutError:
            await self._sync()
            return await self._timed_out(timeout)

    async def _sync(self) -> None:
        """Stores the transcript, after the Running status (with startTime) is stored: so a
        transcript with more than the opening messages always belongs to a started run."""
        if not self._running_stored:
            await self.writer.flush()
            self._running_stored = True
        await self.transcript.sync()

    async def _timed_out(self, timeout: float) -> Outcome:
        message = f"the investigation did not finish within its timeout ({timeout:g}s)"
        return await fail(self.writer, self.recorder, "Timeout", message)

    async def _drive(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        decisions: dict[str, tuple[bool, str | None]],
        started: frozenset[str],
    ) -> Outcome:
        transcript = self.transcript
        stream = agent.run(messages, decisions=decisions, started_call_ids=started)
        try:
            async for event in stream:
                match event:
                    case ev.MessageAdded(message=message):
                        transcript.append_message(message)
                        if message.get("role") == "tool":
                            transcript.flush_soon()
                    case ev.ModelMessage(tool_calls=calls):
                        self.steps += 1
                        names = ", ".join(
                            (c.get("function") or {}).get("name", "?") for c in calls
                        )
                        self.writer.set(steps=self.steps)
                        self._progress(
                            f"Step {self.steps}: calling {names}" if calls
                            else f"Step {self.steps}: writing the analysis"
                        )
                    case ev.ToolStarted():
                        # The intent (and the model turn before it) must be stored first.
                        transcript.append_started(event.call_id)
                        await self._sync()
                        self.tool_call_count += 1
                        self._track_tool(
                            {
                                "id": event.call_id,
                                "name": event.name,
                                "description": event.description,
                                "status": "running",
                                "params": _short_params(event.params),
                            }
                        )
                        self._progress(f"Step {self.steps}: {event.description or event.name}")
                        self.writer.set(transcript=transcript.reference())
                    case ev.ToolResult():
                        self._track_tool(
                            {
                                "id": event.call_id,
                                "name": event.name,
                                "description": event.description,
                                "status": event.status,
                                "params": _short_params(event.params),
                            }
                        )
                    case ev.TokenCount():
                        self.usage["promptTokens"] += event.prompt_tokens
                        self.usage["completionTokens"] += event.completion_tokens
                        self.usage["totalTokens"] += event.total_tokens
                        self.usage["cost"] = round(self.usage["cost"] + (event.cost or 0.0), 8)
                        self.writer.set(usage=dict(self.usage))
                    case ev.ModelRetry():
                        self._progress(
                            f"Step {self.steps + 1}: model call failed ({event.reason}), "
                            f"retry {event.attempt} in {event.delay:.0f}s"
                        )
                    case ev.CompactionStarted():
                        self._progress("Compacting the conversation history")
                    case ev.Compaction():
                        transcript.append_compaction(list(event.messages))
                        self.recorder.post(
                            "Compacted",
                            f"history compacted from {event.tokens_before} to "
                            f"{event.tokens_after} tokens",
                        )
                    case ev.ApprovalNeeded(pending=pending):
                        return await self._await_approval(pending)
                    case ev.Answer():
                        return await self._succeed(event)
                    case ev.AgentError():
                        await self._sync()
                        if event.reason == "Timeout":
                            return await self._timed_out(self.timeout)
                        return await fail(self.writer, self.recorder, event.reason, event.message)
        finally:
            await stream.aclose()
        await self._sync()
        return await fail(
            self.writer, self.recorder, "EngineStopped", "the agent stopped without an answer"
        )

    async def _await_approval(self, pending: list[ev.PendingApproval]) -> Outcome:
        await self._sync()
        ids = [p.tool_call_id for p in pending]
        example = json.dumps({"spec": {"decisions": {ids[0]: {"approved": True}}}})
        message = (
            f"{len(ids)} tool call(s) need approval: "
            + ", ".join(f"{p.tool_call_id} ({p.description or p.tool_name})" for p in pending)
            + f". Approve with: kubectl patch inv {self.ref.name} -n {self.ref.namespace} "
            f"--type merge -p '{example}' (approved: false denies)"
        )
        for p in pending:
            self._track_tool(
                {
                    "id": p.tool_call_id,
                    "name": p.tool_name,
                    "description": p.description,
                    "status": "approval_required",
                    "params": _short_params(p.params),
                }
            )
        self.writer.set_condition(CONDITION_AWAITING_APPROVAL, True, "ToolCallsNeedApproval", message)
        await self.writer.milestone(
            phase=Outcome.AWAITING_APPROVAL.value,
            message=message,
            pendingApprovals=[
                {
                    "toolCallId": p.tool_call_id,
                    "toolName": p.tool_name,
                    "description": p.description,
                    "params": _short_params(p.params),
                }
                for p in pending
            ],
            transcript=self.transcript.reference(),
        )
        self.recorder.post("ApprovalRequired", message)
        return Outcome.AWAITING_APPROVAL

    async def _succeed(self, answer: ev.Answer) -> Outcome:
        await self._sync()
        message = f"Investigation complete after {self.steps} step(s) and {self.tool_call_count} tool call(s)"
        if self.demo:
            message += " (built-in demo model: scripted, not an AI)"
        self.writer.set_condition(CONDITION_SUCCEEDED, True, "Completed", message)
        sections = (
            {title: _cap(text, 16 * 1024) for title, text in answer.sections.items()}
            if answer.sections
            else None
        )
        await self.writer.milestone(
            phase=Outcome.SUCCEEDED.value,
            analysis=_cap(answer.text, MAX_ANALYSIS_CHARS),
            sections=sections,
            message=message,
            pendingApprovals=[],
            completionTime=now_iso(),
            transcript=self.transcript.reference(),
        )
        self.recorder.post("Succeeded", message)
        return Outcome.SUCCEEDED


async def run_investigation(engine: Engine, body: Mapping[str, Any]) -> Outcome:
    """Runs the Investigation in `body` from its transcript until it ends or waits for approval.

    The caller makes sure that every call in status.pendingApprovals has a decision in spec,
    that nobody else runs the same Investigation, and that the object still exists.
    """
    engine.active_runs += 1
    try:
        return await _Run(engine, body).run()
    finally:
        engine.active_runs -= 1
