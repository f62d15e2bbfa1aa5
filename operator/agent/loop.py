"""The agent: a tool-calling loop over litellm, as an async generator of events.

`Agent.run` takes a conversation (OpenAI message dicts) and drives it to an answer, a pause
for approval, or an error, yielding every step as an event (`events.py`). It holds no state
between runs: a paused or crashed run is resumed by calling `run` again with the stored
transcript, the user's `decisions`, and the ids of calls that had started before a crash.
Every call gets an id unique within the run (see `toolcalls.CallIds`); a decision applies
only to the call whose id it names and whose name and arguments match its digest.

One step: (maybe compact the history) -> model call (retried on 429/5xx/timeouts, once more on
malformed tool arguments) -> the turn's tool calls, concurrently -> loop guard. The step that
reaches `max_steps` is asked to answer without tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

from lestrade.config import ModelConfig
from lestrade.context.window import over_budget
from lestrade.operator.agent import prompt_text as text
from lestrade.operator.agent.answer import format_answer
from lestrade.operator.agent.events import (
    AgentError,
    AgentEvent,
    Answer,
    Compaction,
    CompactionStarted,
    MessageAdded,
    ModelMessage,
    ModelRetry,
    TokenCount,
    Truncation,
)
from lestrade.operator.agent.guard import LoopGuard
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.model import ModelCallError, ModelReply, complete
from lestrade.operator.agent.offer import keep_open, opened_toolsets
from lestrade.operator.agent.prompts import (
    InvestigationRequest,
    PromptConfig,
    system_prompt,
    user_prompt,
)
from lestrade.operator.agent.structured import check as check_structured
from lestrade.operator.agent.structured import instruction as structured_instruction
from lestrade.operator.agent.structured import native as native_structured
from lestrade.operator.agent.structured import retry_note as structured_retry_note
from lestrade.operator.agent.structured import structured
from lestrade.operator.agent.tokens import ContextLimits, context_limits, token_breakdown, window_breakdown
from lestrade.operator.agent.toolcalls import (
    Call,
    CallIds,
    Decision,
    calls_of,
    parse_arguments,
    unresolved_calls,
    used_call_ids,
)
from lestrade.operator.agent.turn import BeforeLaunch, StopRun, Turn
from lestrade.operator.agent.window import (
    Compacted,
    compact,
    compact_without_model,
    latest_ask_index,
)
from lestrade.operator.tools.base import ToolRegistry

__all__ = ["Agent", "Decision"]


class Agent:
    """Runs conversations against one model with one set of tools, prompts and limits."""

    def __init__(
        self,
        model: ModelConfig,
        tools: ToolRegistry,
        prompt: PromptConfig | None = None,
        limits: Limits | None = None,
        *,
        enable_tool_approval: bool = True,
        response_format: Mapping[str, Any] | None = None,
        call_ids: CallIds | None = None,
    ) -> None:
        self.model = model
        self.call_ids = call_ids
        """Ids shared with other agents of the same session (a harness session's subagents):
        every call id stays unique across all of them. None: this run's own."""
        self.response_format = dict(response_format) if response_format else None
        """Structured output (OpenAI `response_format`) for the run's model calls (not for
        compaction summaries)."""
        self.tools = tools
        self.prompt = prompt or PromptConfig()
        self.limits = limits or Limits()
        self.enable_tool_approval = enable_tool_approval
        self.context: ContextLimits = context_limits(model.settings, self.limits)

    def system_message(self) -> dict[str, Any]:
        return {"role": "system", "content": system_prompt(self.tools, self.prompt)}

    def user_message(self, ask: str | InvestigationRequest) -> dict[str, Any]:
        """A user turn: the ask plus the enabled user-prompt sections (files, runbooks, time)."""
        return {"role": "user", "content": user_prompt(ask, self.tools, self.prompt)}

    def initial_messages(self, ask: str | InvestigationRequest) -> list[dict[str, Any]]:
        return [self.system_message(), self.user_message(ask)]

    async def run(
        self,
        messages: list[dict[str, Any]],
        decisions: Mapping[str, Decision | Mapping[str, Any] | tuple[Any, ...]] | None = None,
        started_call_ids: Collection[str] = frozenset(),
        before_launch: BeforeLaunch | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Drives `messages` on; ends with exactly one Answer, ApprovalNeeded or AgentError.

        `decisions` maps a pending call id to a `Decision` (or `(approved, reason, digest)`,
        or `{"approved", "reason", "digest"}`), the digest being the one `ApprovalNeeded`
        reported for that call: a decision without it, or for other arguments, is not
        applied. Pass every decision the run ever acted upon and every call id that ever
        started: their ids are never handed out again. `started_call_ids` of the last turn
        (calls that may have launched) are reported as "outcome unknown", never re-run,
        unless the tool declares the call read-only: that one runs again.
        `before_launch` is awaited right before a call that is not read-only launches (the
        operator stores its "launched" mark there).
        """
        normalized = {str(k): Decision.of(v) for k, v in (decisions or {}).items()}
        run = _Run(self, messages, normalized, frozenset(started_call_ids), before_launch)
        async for event in run.events():
            yield event


class _Run:
    """The state of one `Agent.run` call."""

    def __init__(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        decisions: dict[str, Decision],
        started: frozenset[str],
        before_launch: BeforeLaunch | None = None,
    ) -> None:
        self.agent = agent
        self.before_launch = before_launch
        self.limits = agent.limits
        self.settings = agent.model.settings
        self.model_name = agent.model.litellm_model
        self.messages = list(messages)
        self.decisions = decisions
        self.started = started
        seen = used_call_ids(self.messages) | set(decisions) | set(started)
        if agent.call_ids is not None:
            agent.call_ids.used |= seen
            self.call_ids = agent.call_ids
        else:
            self.call_ids = CallIds(seen)
        self.opened = opened_toolsets(agent.tools, self.messages)
        # A tuple: the token counts recognize it from one call to the next (`tokens._tools_text`).
        self.schemas = tuple(agent.tools.schemas(self.opened))
        self.truncations: list[Truncation] = []
        self.guard = LoopGuard(self.limits.repeat_limit, self.limits.no_progress_steps)
        self.deadline: float | None = None
        self.response_format = agent.response_format if structured(agent.response_format) else None
        # A provider without structured output is asked for the object in words too
        # (`structured.py`), and any answer that is not the object gets one corrective step.
        # Known at the first model call (litellm's table; imported off the event loop).
        self.in_words: bool | None = None if self.response_format is not None else False
        self.structured_retries = 1
        ask = latest_ask_index(self.messages)
        since_ask = self.messages[(ask or 0) :]
        self.steps = sum(1 for m in since_ask if m.get("role") == "assistant")
        ran = {m.get("tool_call_id") for m in since_ask if m.get("role") == "tool"}
        self.guard.seed(
            ((c.name, c.params) for m in since_ask for c in calls_of(m) if c.params is not None and c.id in ran),
            (str(m.get("content", "")) for m in since_ask if m.get("role") == "tool"),
        )

    def _add(self, message: dict[str, Any]) -> MessageAdded:
        self.messages.append(message)
        return MessageAdded(index=len(self.messages) - 1, message=message)

    async def events(self) -> AsyncIterator[AgentEvent]:
        if self.limits.timeout is not None:
            self.deadline = asyncio.get_running_loop().time() + self.limits.timeout
        try:
            async for event in self._steps():
                yield event
        except ModelCallError as exc:
            yield AgentError(reason=exc.reason, message=exc.message)
        except StopRun as exc:
            yield AgentError(reason=exc.reason, message=exc.message)

    def _turn(self) -> Turn:
        return Turn(
            registry=self.agent.tools,
            limits=self.limits,
            guard=self.guard,
            approvals=self.agent.enable_tool_approval,
            deadline=self.deadline,
            output_budget=int(self.agent.context.input_budget * self.limits.tool_output_ratio),
            model=self.model_name,
            before_launch=self.before_launch,
        )

    async def _steps(self) -> AsyncIterator[AgentEvent]:
        if not self.messages:
            raise StopRun("InvalidConversation", "the conversation has no messages")
        pending = unresolved_calls(self.messages)
        if pending:
            turn = self._turn()
            async for event in turn.run(pending, self.decisions, self.started, self._add):
                yield event
            self.truncations += turn.truncations
            if turn.paused:
                yield await self._token_count(None)
                yield turn.approval_event()
                return
            for event in self._after_turn(turn):
                yield event
        while True:
            self.steps += 1
            force = self.steps >= self.limits.max_steps
            self._offer()
            async for event in self._maybe_compact():
                yield event
            if force:
                yield self._add({"role": "user", "content": text.ANSWER_NOW})
            reply: ModelReply | None = None
            async for item in self._call_model(force):
                if isinstance(item, ModelRetry):
                    yield item
                else:
                    reply = item
            assert reply is not None
            calls = [] if force else self._parsed_calls(reply)
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if calls:
                assistant["tool_calls"] = [c.as_message_part() for c in calls]
                assistant["content"] = reply.content or None
            yield ModelMessage(
                content=reply.content,
                tool_calls=assistant.get("tool_calls", []),
                reasoning=reply.reasoning,
                step=self.steps,
                latency=reply.latency,
            )
            yield self._add(assistant)
            if not calls:
                yield await self._token_count(reply)
                if force and not reply.content.strip():
                    raise StopRun(
                        "MaxStepsReached",
                        f"the model did not answer within {self.limits.max_steps} steps",
                    )
                content = reply.content
                if self.response_format is not None:
                    checked = check_structured(content, self.response_format)
                    if checked.error is None:
                        content = checked.text
                    elif self.structured_retries > 0 and not force:
                        self.structured_retries -= 1
                        note = structured_retry_note(self.response_format, checked.error, text.NOTE_PREFIX)
                        yield self._add({"role": "user", "content": note})
                        continue
                yield self._answer(content)
                return
            turn = self._turn()
            async for event in turn.run(calls, {}, frozenset(), self._add):
                yield event
            self.truncations += turn.truncations
            yield await self._token_count(reply)
            if turn.paused:
                yield turn.approval_event()
                return
            for event in self._after_turn(turn):
                yield event

    def _offer(self) -> None:
        """The next model call carries the toolsets the history has opened so far (`offer.py`)."""
        opened = self.opened | opened_toolsets(self.agent.tools, self.messages)
        if opened != self.opened:
            self.opened = opened
            self.schemas = tuple(self.agent.tools.schemas(opened))

    def _after_turn(self, turn: Turn) -> list[AgentEvent]:
        """Loop guard verdict on a finished turn: nothing, a note to the model, or stop."""
        if self.guard.stuck:
            raise StopRun(
                "LoopDetected",
                "the model kept repeating a tool call it was told would not run again",
            )
        verdict = self.guard.record_step(turn.outputs)
        if verdict == "stop":
            raise StopRun(
                "LoopDetected",
                f"{self.guard.stale_steps} steps in a row produced only tool results "
                "already seen; the investigation is not making progress",
            )
        if verdict == "warn":
            note = (
                f"{text.NOTE_PREFIX} Loop guard: the last {self.guard.stale_steps} steps "
                "returned only results you had already seen. Change your approach or give "
                "your final answer now."
            )
            return [self._add({"role": "user", "content": note})]
        return []

    def _parsed_calls(self, reply: ModelReply) -> list[Call]:
        """The reply's calls with parsed arguments and ids unique within the run (providers
        omit or repeat ids; results and decisions are matched to calls by id)."""
        calls: list[Call] = []
        for raw in reply.tool_calls:
            params, error = parse_arguments(raw.arguments)
            call_id = self.call_ids.assign(raw.id)
            calls.append(Call(call_id, raw.name, raw.arguments, params, error))
        return calls

    async def _call_model(self, force: bool) -> AsyncIterator[ModelRetry | ModelReply]:
        """One step's model call, retried once with a note if a tool call's JSON is broken."""
        messages: list[dict[str, Any]] = self.messages
        for attempt in range(2):
            reply: ModelReply | None = None
            settings = self.settings
            if self.agent.response_format:
                settings = {**settings, "response_format": self.agent.response_format}
            asked = messages
            if self.in_words is None:
                self.in_words = not await asyncio.to_thread(native_structured, self.model_name)
            if self.in_words and self.response_format is not None:
                note = structured_instruction(self.response_format, text.NOTE_PREFIX)
                asked = [*messages, {"role": "user", "content": note}]
            async for item in complete(
                settings,
                asked,
                max_tokens=self.agent.context.max_output,
                limits=self.limits,
                deadline=self.deadline,
                tools=self.schemas,
                tool_choice="none" if force else None,
            ):
                if isinstance(item, ModelRetry):
                    yield item
                else:
                    reply = item
            assert reply is not None
            bad = [] if force else _malformed(reply)
            if not bad:
                yield reply
                return
            names = ", ".join(label for label, _ in bad)
            error = bad[0][1] or "invalid JSON"
            if attempt == 1:
                raise StopRun(
                    "MalformedToolCall",
                    f"the model sent tool call arguments that are not valid JSON twice: {names}: {error}",
                )
            yield ModelRetry(attempt=1, reason="MalformedToolCall", delay=0.0, message=error)
            note = text.MALFORMED_RETRY.format(calls=names, error=error)
            messages = [*self.messages, {"role": "user", "content": note}]

    async def _maybe_compact(self) -> AsyncIterator[AgentEvent]:
        context = self.agent.context
        breakdown = await window_breakdown(self.messages, self.schemas, self.model_name)
        before = breakdown["total_tokens"]
        if not over_budget(before, context.input_budget, self.limits.compaction_ratio):
            return
        threshold_pct = round(self.limits.compaction_ratio * 100)
        if self.limits.compaction_policy == "manual":
            return  # the user compacts (context-store `manual`); tool outputs are still cut
        if self.limits.compaction_policy in ("last_n", "skip_parts"):
            compacted = compact_without_model(
                self.messages,
                self.limits.compaction_policy,
                self.limits.compaction_keep,
                self.limits.compaction_skip_kinds,
            )
            if compacted is not None:
                yield self._compacted(before, compacted, "", threshold_pct, {"total_cost": 0.0})
            return
        yield CompactionStarted(
            initial_tokens=before,
            num_messages=len(self.messages),
            max_context_size=context.window,
            threshold_pct=threshold_pct,
        )
        result: Compacted | None = None
        async for item in compact(
            self.settings,
            self.messages,
            limits=self.limits,
            input_budget=context.input_budget,
            max_output=context.max_output,
            deadline=self.deadline,
        ):
            if isinstance(item, ModelRetry):
                yield item
            else:
                result = item
        if result is None:
            return  # nothing old enough to summarize; the window stays as it is
        cost = {"total_cost": result.reply.cost, **result.reply.usage}
        yield self._compacted(before, result.messages, result.summary, threshold_pct, cost)

    def _compacted(
        self,
        before: int,
        messages: list[dict[str, Any]],
        summary: str,
        threshold_pct: int,
        cost: dict[str, float],
    ) -> Compaction:
        """Makes `messages` the working history and reports it."""
        messages = keep_open(self.agent.tools, messages, self.opened)
        after = token_breakdown(messages, self.schemas, self.model_name)["total_tokens"]
        messages_before = len(self.messages)
        self.messages = messages
        return Compaction(
            tokens_before=before,
            tokens_after=after,
            messages_before=messages_before,
            messages_after=len(self.messages),
            summary=summary,
            max_context_size=self.agent.context.window,
            threshold_pct=threshold_pct,
            compression_ratio_pct=round(100 * (1 - after / before), 1) if before else 0.0,
            compaction_cost=cost,
            messages=list(self.messages),
        )

    async def _token_count(self, reply: ModelReply | None) -> TokenCount:
        usage = reply.usage if reply else {}
        breakdown = await window_breakdown(self.messages, self.schemas, self.model_name)
        return TokenCount(
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
            total_tokens=usage.get("total_tokens", 0),
            cached_tokens=usage.get("cached_tokens", 0),
            cost=reply.cost if reply else 0.0,
            breakdown=breakdown,
            max_tokens=self.agent.context.window,
            max_output_tokens=self.agent.context.max_output,
            truncations=list(self.truncations),
        )

    def _answer(self, content: str) -> Answer:
        sections = self.agent.prompt.sections
        if not sections:
            return Answer(text=content)
        analysis, parsed = format_answer(content, list(sections))
        return Answer(text=analysis, sections=parsed)


def _malformed(reply: ModelReply) -> list[tuple[str, str | None]]:
    """(`name (id)`, error) of the reply's calls whose arguments are not a JSON object."""
    parsed = [(raw, parse_arguments(raw.arguments)) for raw in reply.tool_calls]
    return [(f"{raw.name} ({raw.id or 'no id'})", error) for raw, (params, error) in parsed if params is None]
