"""One attempt at a run — an Investigation, or one Conversation turn — from its transcript to
the end or to a pause.

The same code runs inside the operator (one asyncio task per resource) and inside a Job's pod
(`python -m lestrade.operator.job`), so it knows nothing about Kopf, and it is the same for
both kinds: what differs (the first messages, where facts land in status) is asked of the
resource's view and its `Projection`. It is resumable by construction: it always starts from
what the transcript holds, and it writes to the transcript before anything irreversible
happens:

- the model's answer (the assistant message) and the intents to run the turn's tool calls are
  stored (in one write) before any tool runs, so a restart never asks the model again for a
  turn it already took;
- a call that may have an effect is marked "launched" right before it launches, so a restart
  never runs it a second time (the engine reports it to the model as "outcome unknown"; if a
  person had approved it, status and a Warning Event say so and how to approve it again),
  while a call whose intent was stored but that never launched runs after the restart, once;
  a call the tool declares read-only is simply run again, and the model gets its result;
- the decisions the run acts on are stored before the approved calls run, so the call that
  runs is always the stored one, exactly as the model asked;
- status milestones are written only after the transcript they describe is stored, and every
  count in them is derived from the transcript.

Everything else (status progress, Events) is best-effort and coalesced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from opentelemetry import trace

from lestrade.config import ConfigError, ModelConfig
from lestrade.kube import resource_path
from lestrade.operator.agent import events as ev
from lestrade.operator.agent.answer import format_answer
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.loop import Agent
from lestrade.operator.agent.model import ModelCallError, load_litellm
from lestrade.operator.agent.prompts import DEFAULT_SECTIONS, InvestigationRequest, PromptConfig
from lestrade.operator.agent.toolcalls import Call, parse_arguments, unresolved_calls
from lestrade.operator.agent.tracing import fail as span_failed
from lestrade.operator.agent.tracing import tracer
from lestrade.operator.agent.turn import OUTCOME_UNKNOWN
from lestrade.operator.base import metrics
from lestrade.operator.base.budgets import BUDGET_STOPS, run_budget_passed
from lestrade.operator.base.engine import Engine
from lestrade.operator.base.recorder import EventRecorder
from lestrade.operator.harness.rlm import RlmStopped, run_rlm_session
from lestrade.operator.harness.session import HarnessSession, start_session
from lestrade.operator.rlm import SandboxUnavailable
from lestrade.operator.runs.context_window import limits_for
from lestrade.operator.status.projection import ConversationProjection, Projection, projection_for
from lestrade.operator.status.writer import StatusWriter
from lestrade.operator.tenancy.scopes import ScopePolicy, decide_scope, load_policy
from lestrade.operator.tools.base import OPEN_TOOLSET, ToolRegistry
from lestrade.operator.tools.frontend import call_key, frontend_toolset
from lestrade.resources.tenancy import Requester, RunScope, requester_of
from lestrade.runs.progress import model_steps
from lestrade.runs.records import (
    AgentRecord,
    AnswerRecord,
    ApprovalNeededRecord,
    ErrorRecord,
    PendingCall,
    TokensRecord,
    ToolResultRecord,
    TurnRecord,
)
from lestrade.runs.transcript import RecordType, Transcript, TranscriptFenced
from lestrade.runs.views import ConversationView, InvestigationView, RunView, view_of
from lestrade.timefmt import now_iso, parse_time, to_iso

__all__ = ["Outcome", "run_attempt", "fail", "writer_for", "NOT_RUN"]

logger = logging.getLogger(__name__)

NOT_RUN = "Not run: the turn that asked for this call ended before it ran."


class Outcome(StrEnum):
    DONE = "Done"
    FAILED = "Failed"
    AWAITING_APPROVAL = "AwaitingApproval"
    FENCED = "Fenced"
    """Another writer extended the transcript: this attempt stopped without writing status
    (whoever runs the object next resumes from the transcript)."""


def writer_for(engine: Engine, view: RunView, *, progress: bool = False) -> StatusWriter:
    """`progress`: the writer of a run attempt, fenced by a token of its own (`status/writer.py`);
    the supervisor's and the Job watcher's one-off writes are not (they run between attempts)."""
    return StatusWriter(
        engine.kube,
        resource_path(view.plural, view.ref.namespace, view.ref.name),
        view.status,
        interval=engine.status_interval if progress else engine.settings.status.interval,
        generation=view.ref.generation,
        token=f"{engine.settings.replicas.name}/{uuid.uuid4().hex[:12]}" if progress else None,
    )


def _outcome_on_span(outcome: Outcome) -> None:
    """The run's span says how it ended before the final status write: Kopf stops the run's
    daemon as soon as it sees that write, which can cancel us the moment the write returns (so
    the span may end without what `run_attempt` would set after it)."""
    span = trace.get_current_span()
    span.set_attribute("lestrade.run.outcome", str(outcome))
    if outcome == Outcome.FAILED:
        span_failed(span, "RunFailed")


async def fail(
    projection: Projection,
    recorder: EventRecorder,
    reason: str,
    message: str,
    state: Any = None,
    started: float | None = None,
) -> Outcome:
    """Marks the run (or turn) Failed: status milestone + Warning Event. `started` (unix time)
    is the run's start when the caller knows it better than the view it was given."""
    if started is None:
        begun = projection.view.started_at()
        started = begun.timestamp() if begun is not None else None
    metrics.run_failed(projection.view.kind, reason, started)
    projection.failed(state, reason, message)
    # Announced before the final write: Kopf stops this daemon as soon as it sees that write
    # (its work filter stops matching), which can cancel us the moment the write returns.
    recorder.post(reason, message, "Warning")
    _outcome_on_span(Outcome.FAILED)
    await projection.writer.flush()
    return Outcome.FAILED


class _Attempt:
    """The state of one attempt; see `run_attempt`."""

    def __init__(self, engine: Engine, view: RunView) -> None:
        self.engine = engine
        self.view = view
        self.ref = view.ref
        self.writer = writer_for(engine, view, progress=True)
        self.projection = projection_for(self.writer, view)
        self.recorder = EventRecorder(engine.kube, self.ref.involved, engine.component, engine.settings.pod_name)
        self.transcript = Transcript(
            engine.kube,
            self.ref.namespace,
            self.ref.owner,
            chunk_limit=engine.settings.status.transcript_chunk_bytes,
            requester=self.ref.requester,
        )
        self.demo = False
        self.frontend_pause: set[str] = set()
        """Names of the Conversation's pause-mode frontend tools (calls the client runs)."""
        self.timeout = engine.settings.runs.default_timeout
        self.started: float | None = None  # unix time the run (or turn) started
        self.meter: metrics.RunMeter | None = None
        self._running_stored = False
        if isinstance(view, ConversationView):
            # A turn's start is sent at once and stored before its records; an Investigation's
            # Running rides with its next status write (`_announce`).
            self.transcript.before_write = self._running_settled
        self.transcript.after_write = self._transcript_stored
        self._step_called_tools = False  # the latest model call asked for tools (not an answer)
        self.requester: Requester | None = None
        self.scope: RunScope | None = None
        self.policy: ScopePolicy | None = None
        self.harness: HarnessSession | None = None
        """A harness session's gate, watch and subagents (`spec.harness`)."""
        self.lost_approvals: list[str] = []
        """Approved calls whose outcome a restart made unknown: what a person must be told."""

    @property
    def state(self) -> Any:
        return self.transcript.state

    def _progress(self, message: str | None = None) -> None:
        if message is not None and self.demo:
            message = f"{message} [demo model]"
        self.projection.progress(self.state, message)

    async def _fail(self, reason: str, message: str) -> Outcome:
        if self.lost_approvals:
            message += ". " + self._lost_approvals_note()
        self.transcript.append(ErrorRecord(t=RecordType.ERROR, reason=reason, message=message, at=now_iso()))
        await self.transcript.sync()
        return await fail(self.projection, self.recorder, reason, message, self.state, self.started)

    # -- the attempt -----------------------------------------------------------------------------

    async def run(self) -> Outcome:
        try:
            return await self._run()
        except TranscriptFenced as exc:
            # A stale owner must not write status either: its view of the run is out of date.
            self.writer.discard()
            logger.warning("%s %s/%s stopped: %s", self.view.kind, self.ref.namespace, self.ref.name, exc)
            return Outcome.FENCED
        finally:
            self.transcript.after_write = None  # no status change once the attempt returns
            if self.harness is not None:
                await self.harness.aclose()
            self.transcript.close()
            await self.writer.close()

    async def _run(self) -> Outcome:
        view, settings = self.view, self.engine.settings
        if view.spec is None:
            return await fail(self.projection, self.recorder, "InvalidSpec", view.spec_error or "")
        try:
            models = self.engine.models
            # A harness session may name a `provider/model` id too (checked again here: the
            # spec can be written with kubectl).
            model = (
                models.resolve(view.spec.model) if getattr(view.spec, "harness", None) else models.get(view.spec.model)
            )
        except ConfigError as exc:
            return await fail(self.projection, self.recorder, "InvalidModel", str(exc))
        self.demo = model.is_demo

        started = view.started_at()
        start_time = now_iso() if started is None else to_iso(started)
        timeout = self.timeout = view.timeout(settings.runs.default_timeout)
        self.started = (parse_time(start_time) or datetime.now(UTC)).timestamp()
        deadline = self.started + timeout
        if time.time() >= deadline:
            return await fail(self.projection, self.recorder, "Timeout", self._timeout_message())

        # An Investigation whose status does not say it started may still have stored records
        # (its Running rides with a later status write): its first chunk says (one GET, mostly
        # a 404). A Conversation always has earlier turns to read.
        if isinstance(view, InvestigationView) and started is None:
            state = await self.transcript.load_if_written()
            fresh = not self.transcript.chunks
        else:
            state, fresh = await self.transcript.load(), False
        scope = await self._scope()
        registry, acting_as = await self.engine.tools_for(scope if self.engine.tenancy else None)
        registry = await (await self._with_mcp(registry)).offered()
        scope.identity = acting_as
        self.scope = scope
        self.writer.set(scope=scope, **({"requester": self.requester} if self.requester else {}))
        tools = self._tools(registry)
        if isinstance(tools, str):
            return await fail(self.projection, self.recorder, "FrontendToolConflict", tools)
        await load_litellm()  # in a thread: the Agent reads litellm's model info in the loop
        agent = self._agent(model, deadline, tools)
        self.meter = metrics.RunMeter(view.kind, self.ref.namespace, model.name, agent.tools.get)
        refusal = await self.engine.ledger.check(self.ref.namespace)
        if refusal is not None:
            BUDGET_STOPS.labels(view.kind, "NamespaceBudgetExhausted").inc()
            return await fail(
                self.projection,
                self.recorder,
                "NamespaceBudgetExhausted",
                f"Not started: {refusal}",
                None if fresh else state,
                self.started,
            )
        self._seed(agent)
        last_seq = state.message_seqs[-1] if state.message_seqs else -1
        last = state.messages[-1] if state.messages else None
        if (
            last
            and last.get("role") == "assistant"
            and not last.get("tool_calls")
            and last_seq >= self.projection.since
        ):
            # The run answered, then stopped before status said so: finish from the stored
            # answer instead of asking the model for another one.
            self._running_stored = True
            text, sections = self._format(str(last.get("content") or ""))
            return await self._done(ev.Answer(text=text, sections=sections))

        started_calls = self._started()  # before this attempt's decisions are recorded
        decisions = self._take_decisions()
        resumed = started is not None or (isinstance(view, InvestigationView) and not fresh)
        self._announce(model, start_time, resumed)
        messages = state.working_messages()
        try:
            async with asyncio.timeout_at(asyncio.get_running_loop().time() + max(0.0, deadline - time.time()) + 5.0):
                if self.harness is not None and self.harness.settings.mode == "rlm":
                    return await self._rlm(messages)
                return await self._drive(agent, messages, decisions, started_calls)
        except TimeoutError:
            return await self._fail("Timeout", self._timeout_message())

    def _timeout_message(self) -> str:
        what = "turn" if isinstance(self.view, ConversationView) else "investigation"
        return f"the {what} did not finish within its timeout ({self.timeout:g}s)"

    def _format(self, content: str) -> tuple[str, dict[str, str] | None]:
        if isinstance(self.view, ConversationView):
            return content, None
        assert self.view.spec is not None
        return format_answer(content, list(self.view.spec.sections or DEFAULT_SECTIONS))

    async def _scope(self) -> RunScope:
        """What this run's tools may read: its namespace plus the admin's grants that apply to
        it and to the requester recorded at admission (never anything from the spec)."""
        self.requester = requester_of(self.view.body.get("metadata"))
        # Read without tenancy too: it also says which MCPServers are shared with this run.
        self.policy = policy = await load_policy(self.engine.kube, self.engine.settings.tenancy.scope_policy)
        if not self.engine.tenancy:
            return RunScope(
                cluster=True,
                reason="tenant isolation is off (LESTRADE_SCOPES_NAMESPACE not set): the tools read the whole cluster",
            )
        return decide_scope(self.ref.namespace, self.requester, policy)

    async def _with_mcp(self, registry: ToolRegistry) -> ToolRegistry:
        """The registry plus the tools of the MCPServers of the run's namespace and of those the
        admin shares with it (`mcpServers` in the scope policy). A server whose first listing
        in this process is under way is waited for a little, so a run that starts with the
        operator still gets it."""
        hub = self.engine.mcp
        shared = self.policy.shared_mcp(self.ref.namespace, self.requester) if self.policy else ()
        if hub.loader is not None:
            await hub.loader(self.ref.namespace, shared)  # type: ignore[arg-type]
        entries = hub.servers_for(self.ref.namespace, shared)  # type: ignore[arg-type]
        if not entries:
            return registry
        await hub.wait_settled(entries, timeout=15.0)
        toolsets = hub.toolsets(entries)
        return ToolRegistry([*registry.toolsets, *toolsets]) if toolsets else registry

    def _tools(self, registry: ToolRegistry) -> ToolRegistry | str:
        """The run's tools: the operator's, plus a Conversation's frontend tools with the
        outputs the client sent for paused calls (or why the frontend tools cannot be used)."""
        spec = self.view.spec
        if not isinstance(self.view, ConversationView) or spec is None or not spec.frontend_tools:
            return registry
        taken = {t.name for t in registry.enabled_tools()} | ({OPEN_TOOLSET} if registry.deferred() else set())
        clash = sorted({t.name for t in spec.frontend_tools} & taken)
        if clash:
            return f"frontend tools may not reuse the names of the operator's tools: {', '.join(clash)}"
        self.frontend_pause = {t.name for t in spec.frontend_tools if t.mode == "pause"}
        outputs = spec.frontend_tool_results or {}
        results: dict[str, str] = {}
        for message in self.state.messages:
            for part in message.get("tool_calls") or []:
                fn = part.get("function") or {}
                params, _ = parse_arguments(fn.get("arguments"))
                if part.get("id") in outputs and params is not None:
                    results[call_key(str(fn.get("name")), params)] = outputs[part["id"]]
        return ToolRegistry([*registry.toolsets, frontend_toolset(spec.frontend_tools, results)])

    def _agent(self, model: ModelConfig, deadline: float, tools: ToolRegistry) -> Agent:
        spec, settings = self.view.spec, self.engine.settings
        assert spec is not None
        conversation = isinstance(self.view, ConversationView)
        prompt = PromptConfig(
            sections=None if conversation else (spec.sections or DEFAULT_SECTIONS),
            cluster_name=settings.runs.cluster_name,
            enabled_prompts=settings.enabled_prompts,
            system_prompt_additions="\n\n".join(
                p for p in (_scope_instructions(self.scope), spec.system_prompt if conversation else None) if p
            )
            or None,
            behavior_controls=spec.behavior_controls if conversation else None,
        )
        # The engine stops model calls and tools at the deadline and says so; the
        # operator's own timeout around `_drive` is the backstop for everything else.
        limits = Limits(
            max_steps=spec.max_steps or settings.runs.default_max_steps,
            timeout=max(1.0, deadline - time.time()),
        )
        if conversation:
            limits = limits_for(spec.context, limits)
        harness = getattr(spec, "harness", None)
        if harness is not None:
            assert isinstance(self.projection, ConversationProjection)
            self.harness = start_session(
                settings=harness,
                kube=self.engine.kube,
                namespace=self.ref.namespace,
                name=self.ref.name,
                short_name=self.ref.short_name,
                model=model,
                tools=tools,
                transcript=self.transcript,
                projection=self.projection,
                limits=limits,
                deadline=deadline,
                spec=spec,
                usage=self._usage,
                ledger=self.engine.ledger,
                sync=self.transcript.sync,
                prompt=prompt,
                progress=self._progress,  # status.transcript follows each write by itself
            )
            tools, limits = self.harness.main_tools(), self.harness.limits(limits)
        return Agent(
            model=model,
            tools=tools,
            prompt=prompt,
            limits=limits,
            enable_tool_approval=spec.enable_tool_approval,
            response_format=_response_format(getattr(spec, "response_format", None)),
            call_ids=self.harness.call_ids if self.harness is not None else None,
        )

    async def _rlm(self, messages: list[dict[str, Any]]) -> Outcome:
        """A harness session in `rlm` mode (`harness_rlm.py`): the question (and the session's
        system-prompt addition) go to the rlm loop; its answer ends the turn."""
        assert self.harness is not None
        recorded = [r for r in self.state.since(self.projection.since) if r["t"] == RecordType.ANSWER]
        if recorded:  # answered before a restart: finish from the stored answer
            return await self._done(ev.Answer(text=str(recorded[-1].get("text") or "")))
        spec = self.view.spec
        asked = [m for m in messages if m.get("role") != "system"]
        if spec is not None and spec.system_prompt:
            asked = [{"role": "system", "content": spec.system_prompt}, *asked]
        try:
            outcome = await run_rlm_session(self.harness.subagents, asked)
        except RlmStopped as exc:
            BUDGET_STOPS.labels(self.view.kind, exc.reason).inc()
            return await self._fail(exc.reason, exc.message)
        except SandboxUnavailable as exc:
            return await self._fail("SandboxUnavailable", f"rlm mode needs a sandbox this node cannot give: {exc}")
        except ModelCallError as exc:
            return await self._fail(exc.reason, exc.message)
        self.transcript.append(
            AnswerRecord(
                t=RecordType.ANSWER,
                text=outcome.answer,
                sections=None,
                at=now_iso(),
                reason=outcome.reason,
                iterations=outcome.iterations,
            )
        )
        return await self._done(ev.Answer(text=outcome.answer))

    def _started(self) -> frozenset[str]:
        """Calls that may have had their effect (reported as "outcome unknown", never re-run,
        unless read-only): those marked launched. A call with only its intent stored never
        launched and runs again. In a harness session a call is marked before its gate
        decides, so one without an approving decision never ran: it goes through the gate
        again (a relay answered while the operator was down is then taken from
        spec.decisions). Read before `_take_decisions` records such an answer."""
        state = self.state
        if self.harness is None:
            return frozenset(state.launched)
        return frozenset(i for i in state.launched if (state.decisions.get(i) or {}).get("approved"))

    def _usage(self) -> tuple[int, float]:
        """(tokens, cost) of this run or turn so far, subagents included."""
        usage = self.projection.facts(self.state).usage
        return usage.total_tokens, usage.cost

    def _seed(self, agent: Agent) -> None:
        """The messages a new run (or turn) starts with; nothing when they are stored."""
        state, spec = self.state, self.view.spec
        if isinstance(self.view, InvestigationView):
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
            return
        projection = self.projection
        assert isinstance(projection, ConversationProjection)
        if projection.index not in state.turns:
            # Calls left open by an earlier turn that failed (or timed out waiting for
            # approval) are closed, so this turn can never run them.
            for call in unresolved_calls(state.working_messages()):
                status_text = "error"
                self.transcript.append(
                    ToolResultRecord(
                        t=RecordType.TOOL_RESULT,
                        id=call.id,
                        name=call.name,
                        status=status_text,
                        description="not run",
                    )
                )
                self.transcript.append_message({"role": "tool", "tool_call_id": call.id, "content": NOT_RUN})
            if not state.turns:
                # The first turn (messages stored through the context store may precede it).
                self.transcript.append_message(agent.system_message())
            self.transcript.append(TurnRecord(t=RecordType.TURN, index=projection.index, at=now_iso()))
            self.transcript.append_message(self._user_message(agent, projection.index))
        projection.attach(state)

    def _user_message(self, agent: Agent, index: int) -> dict[str, Any]:
        """Turn `index`'s question; with its images as content parts (OpenAI's image_url)."""
        message = agent.user_message(self.view.asks[index])  # type: ignore[attr-defined]
        spec = self.view.spec
        turns = spec.turns if isinstance(self.view, ConversationView) and spec is not None else []
        images = turns[index].images if index < len(turns) else None
        if not images:
            return message
        parts: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}]
        for image in images:
            url: dict[str, Any] = {"url": image.url}
            if image.detail:
                url["detail"] = image.detail
            if image.format:
                url["format"] = image.format
            parts.append({"type": "image_url", "image_url": url})
        return {**message, "content": parts}

    def _take_decisions(self) -> dict[str, tuple[bool, str | None, str | None]]:
        """Decisions acted upon before, plus the new ones for the calls that wait (stored
        before anything they allow can run)."""
        state = self.state
        decided, undecided = self.view.split_decisions()
        # A harness session's relays wait inside the attempt: the ones a restart left in status
        # are asked again or withdrawn by this attempt (`supervisor._relays_wait_inside`).
        if undecided and getattr(self.view.spec, "harness", None) is None:
            raise RuntimeError(f"run started while decisions are missing for {undecided}")
        self.decided_now = [i for i in decided if i not in state.decisions]
        # A decision is bound to the call the person saw: its digest as the approval_needed
        # record (and status) showed it, or the one they wrote into the decision themselves.
        digests = state.pending_digests()
        for call_id in self.decided_now:
            decision = self.view.decisions[call_id]
            self.transcript.append_decision(
                call_id,
                bool(decision["approved"]),
                decision.get("reason"),
                decision.get("digest") or digests.get(call_id) or None,
            )
        # Stored in the background: nothing irreversible happens before the next `sync()`,
        # which a tool call's intent forces (and which writes these records first, in order).
        # Not at once: under load the first model turn usually rides along (`_result_delay`).
        self.transcript.flush_soon(self.engine.status_interval())
        self.engine.applied_decisions[self.ref.uid] = dict(state.decisions)
        return {i: (bool(d["approved"]), d.get("reason"), d.get("digest")) for i, d in state.decisions.items()}

    def _announce(self, model: ModelConfig, start_time: str, resumed: bool) -> None:
        verb = "Resumed" if resumed else "Started"
        what = f"model {model.name}" + (" (built-in demo model: scripted, not an AI)" if self.demo else "")
        if self.decided_now:
            approved = sum(1 for i in self.decided_now if self.state.decisions[i]["approved"])
            note = f"{verb} after decisions: {approved} approved, {len(self.decided_now) - approved} denied"
        elif isinstance(self.projection, ConversationProjection):
            note = f"{verb} turn {self.projection.index + 1} with {what}"
        else:
            note = f"{verb} investigating with {what}"
        if self.requester is not None:
            note += f", asked by {self.requester.username}"
        if self.scope is not None:
            note += f"; tools read {self.scope.describe()}"
        self.projection.running(note, start_time, model.name, self.transcript.reference())
        self._progress()
        if isinstance(self.projection, ConversationProjection):
            self.writer.send_soon()  # stored before the turn's records (`_running_settled`)
        # An Investigation's Running is progress: it rides with the next status write, within
        # the status interval, so a run that ends sooner (a burst stretches the interval) writes
        # its status once, and the apiserver and every watcher see one change instead of two.
        reason = "TurnStarted" if isinstance(self.projection, ConversationProjection) and not resumed else verb
        self.recorder.post(reason, note)

    def _transcript_stored(self) -> None:
        """status.transcript follows every write, delayed ones included (within the status
        interval, as progress): `kubectl lestrade follow` reads the transcript when the run
        changes, and a turn of reads is stored after its status progress was sent."""
        self.writer.set(transcript=self.transcript.reference())

    async def _running_settled(self) -> None:
        """A Conversation turn's transcript writes wait until its Running status (the turn in
        status, with its start) is stored: so the turn's records always belong to a turn that
        status knows."""
        if not self._running_stored:
            await self.writer.settled()  # Running was sent at the start (`_announce`)
            self._running_stored = True

    async def _drive(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        decisions: dict[str, tuple[bool, str | None, str | None]],
        started: frozenset[str],
    ) -> Outcome:
        transcript, meter = self.transcript, self.meter
        assert meter is not None
        stream = agent.run(messages, decisions=decisions, started_call_ids=started, before_launch=self._launching)
        try:
            async for event in stream:
                match event:
                    case ev.MessageAdded(message=message):
                        transcript.append_message(message)
                        if message.get("role") == "tool":
                            transcript.flush_soon(self._result_delay(message))
                    case ev.ModelMessage(tool_calls=calls):
                        self._step_called_tools = bool(calls)
                        if self.harness is not None and event.reasoning:
                            # 003's `reasoning` event: kept beside the message, never sent back.
                            transcript.append(
                                AgentRecord(t=RecordType.AGENT, event="reasoning", content=event.reasoning)
                            )
                        meter.model_call(event.latency)
                        steps = model_steps(self.state.since(self.projection.since)) + 1
                        names = ", ".join((c.get("function") or {}).get("name", "?") for c in calls)
                        self._progress(
                            f"Step {steps}: calling {names}" if calls else f"Step {steps}: writing the answer"
                        )
                    case ev.ToolStarted():
                        transcript.append_started(event.call_id, event.digest, read_only=event.read_only)
                        meter.tool_started(event.call_id, event.name)
                        self._progress(event.description or event.name)
                    case ev.ToolsStarting(may_act=may_act):
                        if may_act:
                            # Every intent of the turn (and the model turn before them) is
                            # stored, in one write, before any of its calls runs.
                            await transcript.sync()  # status.transcript follows (`_transcript_stored`)
                        else:
                            # Only reads: lost in a crash, the model is asked again and they
                            # run again. Stored with their results (`_result_delay`) and what
                            # follows: at most one write per status interval, which stretches
                            # under load (each write is a ConfigMap update for every watcher).
                            transcript.flush_soon(self.engine.status_interval())
                    case ev.ToolResult(status=status) if status != "approval_required":
                        if event.output == OUTCOME_UNKNOWN:
                            self._outcome_unknown(event)
                        transcript.append(
                            ToolResultRecord(
                                t=RecordType.TOOL_RESULT,
                                id=event.call_id,
                                name=event.name,
                                status=status,
                                description=event.description,
                                digest=event.digest,
                            )
                        )
                        meter.tool_ended(event.call_id, event.name, status)
                        self._progress()
                    case ev.TokenCount():
                        # The window's breakdown and limits ride along: the API's token_count
                        # events (reference 000's metadata) are rebuilt from this record alone.
                        meter.tokens(
                            event.prompt_tokens, event.completion_tokens, event.cost or 0.0, cached=event.cached_tokens
                        )
                        transcript.append(
                            TokensRecord(
                                t=RecordType.TOKENS,
                                promptTokens=event.prompt_tokens,
                                completionTokens=event.completion_tokens,
                                totalTokens=event.total_tokens,
                                cachedTokens=event.cached_tokens,
                                cost=event.cost or 0.0,
                                breakdown=dict(event.breakdown),
                                maxTokens=event.max_tokens,
                                maxOutputTokens=event.max_output_tokens,
                                truncations=[dataclasses.asdict(t) for t in event.truncations],
                            )
                        )
                        self._progress()
                        stop = await self._budget_stop(event.total_tokens, event.cost or 0.0)
                        if stop is not None:
                            BUDGET_STOPS.labels(self.view.kind, stop[0]).inc()
                            return await self._fail(*stop)
                    case ev.ModelRetry():
                        meter.model_retry(event.reason)
                        self._progress(
                            f"model call failed ({event.reason}), retry {event.attempt} in {event.delay:.0f}s"
                        )
                    case ev.CompactionStarted():
                        self._progress("Compacting the conversation history")
                    case ev.Compaction():
                        transcript.append_compaction(list(event.messages), event.tokens_before, event.tokens_after)
                        self._progress()
                        self.recorder.post(
                            "Compacted",
                            f"history compacted from {event.tokens_before} to {event.tokens_after} tokens",
                        )
                    case ev.ApprovalNeeded(pending=pending):
                        return await self._await_approval(pending)
                    case ev.Answer():
                        return await self._done(event)
                    case ev.AgentError():
                        if event.reason == "Timeout":
                            return await self._fail("Timeout", self._timeout_message())
                        return await self._fail(event.reason, event.message)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        return await self._fail("EngineStopped", "the agent stopped without an answer")

    def _result_delay(self, message: dict[str, Any]) -> float:
        """How long a tool's result may wait before it is stored. The result of a call that
        may have had an effect is stored at once: a restart before it is stored tells the model
        "outcome unknown" for a call that did run. A read-only call's result may wait as long
        as status progress does (`Engine.status_interval`, longer under load), so that it and
        the next model turn usually go in one write; lost in a crash, the call simply runs
        again."""
        if message.get("tool_call_id") in self.state.launched:
            return 0.0
        return self.engine.status_interval()

    async def _launching(self, call: Call) -> None:
        """Right before a call that may have an effect launches: its mark is stored, so a
        restart never runs it again (and one without the mark runs after a restart)."""
        self.transcript.append_launched(call.id, call.digest)
        await self.transcript.sync()

    def _outcome_unknown(self, event: ev.ToolResult) -> None:
        """A call that may have run before a restart is reported as such; if a person had
        approved it, they are told (Warning Event, and the run's final status message) that it
        may not have taken effect, and how to approve it again."""
        decision = self.state.decisions.get(event.call_id) or {}
        if not decision.get("approved"):
            return
        what = f"{event.call_id} ({event.description or event.name})"
        self.lost_approvals.append(what)
        message = self._lost_approvals_note()
        self._progress(message)
        self.recorder.post("ApprovedActionOutcomeUnknown", message, "Warning")

    def _lost_approvals_note(self) -> str:
        if not self.lost_approvals:
            return ""
        example = json.dumps({"spec": {"decisions": {"NEW_CALL_ID": {"approved": True}}}})
        return (
            f"Approved action(s) may not have taken effect: {', '.join(self.lost_approvals)}: "
            "the operator restarted while they ran, so they were not run again. Check whether "
            "the change happened. The model was told; if it asks for the action again, approve "
            f"the new call with: kubectl patch {self.ref.short_name} {self.ref.name} "
            f"-n {self.ref.namespace} --type merge -p '{example}'"
        )

    async def _budget_stop(self, tokens: int, cost: float) -> tuple[str, str] | None:
        """After a model call: its spend goes to the namespace's ledger; then, unless the call
        was the final answer (already paid for, so it is kept), the reason to stop if the
        run's or the namespace's budget is passed — before another model call is made."""
        await self.engine.ledger.add(self.ref.namespace, tokens, cost)
        if not self._step_called_tools:
            return None
        spec = self.view.spec
        if getattr(spec, "max_tokens", None) is not None or getattr(spec, "max_cost", None) is not None:
            usage = self.projection.facts(self.state).usage
            passed = run_budget_passed(spec, usage.total_tokens, usage.cost)
            if passed is not None:
                return "BudgetExceeded", f"Stopped: {passed}; what it found so far is kept"
        passed = await self.engine.ledger.check(self.ref.namespace)
        if passed is not None:
            return "NamespaceBudgetExhausted", f"Stopped: {passed}; what it found so far is kept"
        return None

    def _pending_call(self, pending: ev.PendingApproval) -> PendingCall:
        call = PendingCall(
            toolCallId=pending.tool_call_id,
            toolName=pending.tool_name,
            description=pending.description,
            params=pending.params,
            digest=pending.digest,
        )
        if pending.tool_name in self.frontend_pause:
            call["frontend"] = True
        return call

    async def _await_approval(self, pending: list[ev.PendingApproval]) -> Outcome:
        self.transcript.append(
            ApprovalNeededRecord(
                t=RecordType.APPROVAL_NEEDED,
                pending=[self._pending_call(p) for p in pending],
            )
        )
        await self.transcript.sync()
        ids = [p.tool_call_id for p in pending]
        example = json.dumps({"spec": {"decisions": {ids[0]: {"approved": True}}}})
        message = (
            f"{len(ids)} tool call(s) need approval: "
            + ", ".join(f"{p.tool_call_id} ({p.description or p.tool_name})" for p in pending)
            + f". Approve with: kubectl patch {self.ref.short_name} {self.ref.name} "
            f"-n {self.ref.namespace} --type merge -p '{example}' (approved: false denies)"
        )
        if self.lost_approvals:
            message += ". " + self._lost_approvals_note()
        self.projection.awaiting(self.state, message, self.transcript.reference())
        metrics.run_ended(self.view.kind, "AwaitingApproval", self.started)
        self.recorder.post("ApprovalRequired", message)  # before the write: see `fail`
        _outcome_on_span(Outcome.AWAITING_APPROVAL)
        await self.writer.flush()
        return Outcome.AWAITING_APPROVAL

    async def _done(self, answer: ev.Answer) -> Outcome:
        state = self.state
        if not any(r["t"] == RecordType.ANSWER for r in state.since(self.projection.since)):
            self.transcript.append(
                AnswerRecord(t=RecordType.ANSWER, text=answer.text, sections=answer.sections, at=now_iso())
            )
        await self.transcript.sync()
        facts = self.projection.facts(state, settled=True)
        counts = f"{facts.steps} step(s) and {facts.tool_call_count} tool call(s)"
        if isinstance(self.projection, ConversationProjection):
            message, reason = f"Turn {self.projection.index + 1} answered after {counts}", "Answered"
        else:
            message, reason = f"Investigation complete after {counts}", "Succeeded"
        if self.demo:
            message += " (built-in demo model: scripted, not an AI)"
        if self.lost_approvals:
            message += ". " + self._lost_approvals_note()
        self.projection.done(state, answer.text, answer.sections, message, self.transcript.reference())
        spec = self.view.spec
        max_steps = (spec.max_steps if spec is not None else None) or self.engine.settings.runs.default_max_steps
        # Counted and announced before the final write, for the reason given in `fail`.
        metrics.run_ended(self.view.kind, reason, self.started, facts.steps, max_steps)
        self.recorder.post(reason, message)
        _outcome_on_span(Outcome.DONE)
        await self.writer.flush()
        return Outcome.DONE


def _response_format(text: str | None) -> dict[str, Any] | None:
    """spec.responseFormat parsed; a value that is not a JSON object is ignored (the API
    validates it; a kubectl user who wrote nonsense gets free text)."""
    try:
        value = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def run_attempt(engine: Engine, body: dict[str, Any] | Any) -> tuple[Outcome, dict[str, Any] | None]:
    """Runs the resource in `body` from its transcript until it (or its current turn) ends or
    waits for approval; also returns the object as the apiserver stored its last status write.

    The caller makes sure that every call in status.pendingApprovals has a decision in spec,
    that nobody else runs the same resource, and that the object still exists.
    """
    view = view_of(body)
    active = metrics.RUNS_ACTIVE.labels(view.kind)
    engine.active_runs += 1
    active.inc()
    # One span per attempt (a run, or a Conversation turn, up to its end or a pause for
    # approval); the model and tool calls are its children. Linked to the resource by kind,
    # namespace, name and uid, so a trace is found from `kubectl get` and back.
    with tracer().start_as_current_span(f"invoke_agent {view.kind} {view.ref.namespace}/{view.ref.name}") as span:
        span.set_attribute("gen_ai.operation.name", "invoke_agent")
        span.set_attribute("k8s.namespace.name", view.ref.namespace)
        span.set_attribute("lestrade.run.kind", view.kind)
        span.set_attribute("lestrade.run.name", view.ref.name)
        span.set_attribute("lestrade.run.uid", view.ref.uid)
        if isinstance(view, ConversationView) and view.current_turn is not None:
            span.set_attribute("lestrade.run.turn", view.current_turn)
        try:
            attempt = _Attempt(engine, view)
            outcome = await attempt.run()
            span.set_attribute("lestrade.run.outcome", str(outcome))
            if outcome == Outcome.FAILED:
                span_failed(span, "RunFailed")
            return outcome, attempt.writer.last_object
        finally:
            engine.active_runs -= 1
            active.dec()


def _scope_instructions(scope: RunScope | None) -> str | None:
    """What the model is told about its reach (the apiserver enforces it either way)."""
    if scope is None or scope.cluster:
        return None
    return (
        "Access scope: your tools can read only these namespaces: "
        + ", ".join(scope.namespaces)
        + " (and cluster-scoped objects such as nodes). Anything in another namespace is "
        "forbidden to you by the Kubernetes API, on purpose, and so is listing across all "
        "namespaces: always pass one of these namespaces. If the question is about another "
        "namespace, do not guess: say plainly that this run is not allowed to read it and that "
        "a cluster admin can grant wider scope."
    )
