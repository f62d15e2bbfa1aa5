"""Subagents of an agent-harness session: the `agent` tool and the child agent loops it runs.

The `agent` tool (offered only in harness sessions) spawns a child agent inside the same turn:
its own task and its own history, the session's tools (each call through the session's
`Gate`: rules, else a relay that pauses only this child), and the `agent` tool again. A spawn
from depth `maxDepth` is refused as a tool error. The child's answer is the tool result of the
spawning call; several `agent` calls of one model turn run concurrently, because the engine
runs one turn's calls together.

Everything a child does is recorded in the session's transcript with its `agentId`,
`parentId` (the spawning call's id) and `depth`, between `agent` start and end records, so the
API can stream it and a restart loses nothing: a child that was running when the operator
stopped is not resumed; its parent is told precisely what became of it (`Subagents.interrupted`):
stopped by the restart after so many model calls, with the tool calls it made and the last
thing it wrote (its partial result), or its answer if it had answered just before. Its `end`
record is written then (reason `stopped`), and the relays it was waiting for are closed with a
denying decision naming the restart, so neither the session's clients nor `POST /chat/relay`
wait for an agent that no longer runs.

Budgets: the child's token counts are `tokens` records of the turn, so the run's
`spec.maxTokens`/`maxCost` and the namespace ledger count them; a child checks them after each
of its model calls and stops with an error result when they are passed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lestrade.config import ModelConfig
from lestrade.operator.agent import events as ev
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.loop import Agent
from lestrade.operator.agent.prompts import PromptConfig
from lestrade.operator.agent.toolcalls import Call, CallIds
from lestrade.operator.base.budgets import Ledger, run_budget_passed
from lestrade.operator.harness.gate import AgentTag, Gate, GatedTool
from lestrade.operator.tools.base import ToolOutput, ToolRegistry, Toolset
from lestrade.resources.conversation import HarnessSettings
from lestrade.runs.records import (
    AgentRecord,
    DecisionRecord,
    MessageRecord,
    Record,
    TokensRecord,
    ToolResultRecord,
    ToolStartedRecord,
)
from lestrade.runs.transcript import RecordType, Transcript

__all__ = ["AGENT_TOOL", "AgentTool", "Subagents", "SUBAGENT_PROMPT", "depth_refusal"]

AGENT_TOOL = "agent"
SUBAGENT_PROMPT = (
    "You are a subagent: another agent gave you the task in the user message. Work on it with "
    "your tools and answer with what you found; your answer goes back to that agent as the "
    "result of its call."
)


def depth_refusal(max_depth: int) -> str:
    return f"cannot spawn a subagent: the depth limit is reached (maxDepth {max_depth})"


@dataclass
class AgentTool:
    """`agent`: spawns a subagent for a task and returns its answer."""

    subagents: Subagents
    tag: AgentTag
    name: str = AGENT_TOOL
    description: str = (
        "Spawn a subagent: it works on the task you give it with the same read-only tools and "
        "returns its answer. Use it to split independent work; several agent calls in one "
        "turn run at the same time."
    )
    parameters: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What the subagent should find out or do."},
            },
            "required": ["task"],
        }
    )

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        task = str(params.get("task") or "")
        return "subagent: " + (task[:80] + "…" if len(task) > 80 else task)

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        raise RuntimeError("the agent tool runs through run_call (it needs the call's id)")

    async def run_call(self, call: Call, params: dict[str, Any]) -> ToolOutput:
        return await self.subagents.spawn(self.tag, call.id, str(params.get("task") or ""))

    def interrupted(self, call: Call) -> str | None:
        return self.subagents.interrupted(call.id)


@dataclass
class Subagents:
    """What every agent of one harness session shares: model, tools, gate, transcript."""

    model: ModelConfig
    base: ToolRegistry
    """The session's tools before gating (the operator's registry for this run's scope)."""
    gate: Gate
    settings: HarnessSettings
    transcript: Transcript
    limits: Limits
    deadline: float
    """Unix time the turn must end by."""
    spec: Any
    """The Conversation spec (its maxTokens/maxCost bound the whole turn, children included)."""
    usage: Callable[[], tuple[int, float]]
    """(tokens, cost) the turn has spent so far, children included (from the transcript)."""
    ledger: Ledger
    namespace: str
    sync: Callable[[], Awaitable[None]]
    prompt: PromptConfig
    tool_timeout: float
    call_ids: CallIds
    progress: Callable[[], None]
    """Tells status what the transcript now holds (the API reads the transcript when the
    object changes; a subagent's records must not wait for the main agent's next step)."""
    """One id space for every agent of the session: relays and decisions are keyed by call id."""

    def registry_for(self, tag: AgentTag) -> ToolRegistry:
        """The tools of one agent: the session's, each gated, plus `agent`."""
        toolsets = [
            Toolset(
                ts.name,
                [GatedTool(t, self.gate, tag, self.tool_timeout) for t in ts.tools],  # type: ignore[misc]
                ts.instructions,
                ts.enabled,
            )
            for ts in self.base.toolsets
        ]
        spawn = GatedTool(AgentTool(self, tag), self.gate, tag, self.tool_timeout)
        toolsets.append(Toolset("subagents", [spawn]))  # type: ignore[list-item]
        return ToolRegistry(toolsets)

    def interrupted(self, call_id: str) -> str | None:
        """After a restart: what the subagent spawned by `call_id` did before it (None: it never
        started, so the engine's own "outcome unknown" stands). Records its end and closes its
        relays (and its own subagents' ones) as a side effect, once."""
        records = self.transcript.state.records
        start = next(
            (
                r
                for r in records
                if r.get("t") == RecordType.AGENT and r.get("event") == "start" and r.get("parentId") == call_id
            ),
            None,
        )
        if start is None:
            return None
        agent_id = str(start.get("agentId") or f"agent-{call_id}")
        mine = [r for r in records if r.get("agentId") == agent_id]
        replies = [
            r["message"]
            for r in mine
            if r["t"] == RecordType.MESSAGE and (r.get("message") or {}).get("role") == "assistant"
        ]
        results = [r for r in mine if r.get("t") == RecordType.TOOL_RESULT]
        end = next((r for r in mine if r.get("t") == RecordType.AGENT and r.get("event") == "end"), None)
        last = next((str(m.get("content") or "").strip() for m in reversed(replies) if m.get("content")), "")
        if end is not None and end.get("reason") in ("final", "max_iterations") and last:
            return "The operator restarted right after the subagent answered (its answer was kept): " + last[:4000]
        closed = self._close_relays(call_id, self._lineage(agent_id))
        if end is None:
            self.transcript.append(
                AgentRecord(
                    t=RecordType.AGENT,
                    event="end",
                    reason="stopped",
                    iterations=len(replies),
                    error="stopped by an operator restart; not resumed",
                    agentId=agent_id,
                    parentId=call_id,
                    depth=start.get("depth", 1),
                )
            )
        calls = ", ".join(f"{r.get('name') or r.get('id')} ({r.get('status')})" for r in results[-10:])
        text = (
            f"The subagent was stopped by an operator restart after {len(replies)} model call(s) and "
            f"{len(results)} tool call(s), before it answered; it was not resumed (spawn a new one "
            "for what is still missing)."
        )
        if calls:
            text += f" Its tool calls: {calls}."
        if closed:
            text += f" Its pending approval request(s) {', '.join(closed)} were withdrawn."
        text += f" What it had written so far: {last[:4000]}" if last else " It had written nothing yet."
        return text

    def _lineage(self, agent_id: str) -> set[str]:
        """The agent and the subagents it spawned, and theirs."""
        records = self.transcript.state.records
        family, grown = {agent_id}, True
        while grown:
            calls = {
                r.get("id") for r in records if r.get("t") == RecordType.TOOL_STARTED and r.get("agentId") in family
            }
            spawned = {
                str(r.get("agentId"))
                for r in records
                if r.get("t") == RecordType.AGENT and r.get("event") == "start" and r.get("parentId") in calls
            }
            grown = not spawned <= family
            family |= spawned
        return family

    def _close_relays(self, call_id: str, family: set[str]) -> list[str]:
        """Denies the undecided relays of a stopped subagent and its own subagents (after a
        restart none of them runs, so nothing would ever take the answer): the API's relay
        answers and the session's clients see them decided instead of waiting."""
        state = self.transcript.state
        waiting = next(
            (r.get("pending") or [] for r in reversed(state.records) if r.get("t") == RecordType.APPROVAL_NEEDED), []
        )
        closed = []
        for pending in waiting:
            relay_id = pending.get("toolCallId")
            if not relay_id or relay_id in state.decisions or pending.get("agentId") not in family:
                continue
            decision = DecisionRecord(
                t=RecordType.DECISION,
                id=relay_id,
                approved=False,
                reason=f"withdrawn: the subagent that asked was stopped by an operator restart (spawned by {call_id})",
                digest=pending.get("digest") or "",
            )
            for key in ("agentId", "parentId", "depth"):
                if key in pending:
                    decision[key] = pending[key]  # type: ignore[literal-required]
            self.transcript.append(decision)
            closed.append(relay_id)
        return closed

    def _remaining(self) -> float:
        return max(1.0, self.deadline - time.time())

    async def spawn(self, parent: AgentTag, call_id: str, task: str) -> ToolOutput:
        depth = parent.depth + 1
        if depth > self.settings.max_depth:
            return ToolOutput("error", error=depth_refusal(self.settings.max_depth))
        if not task.strip():
            return ToolOutput("error", error="the task is empty: say what the subagent should do")
        tag = AgentTag(f"agent-{call_id}", call_id, depth)
        remaining = self._remaining()
        agent = Agent(
            model=self.model,
            tools=self.registry_for(tag),
            prompt=dataclasses.replace(
                self.prompt,
                system_prompt_additions="\n\n".join(
                    p for p in (self.prompt.system_prompt_additions, SUBAGENT_PROMPT) if p
                ),
            ),
            limits=dataclasses.replace(
                self.limits,
                max_steps=self.settings.max_iterations,
                timeout=remaining,
                tool_timeout=remaining,
            ),
            call_ids=self.call_ids,
        )
        return await _Child(self, tag, agent).run(task)


class _Child:
    """One subagent's loop, recorded in the session's transcript."""

    def __init__(self, subagents: Subagents, tag: AgentTag, agent: Agent) -> None:
        self.s = subagents
        self.tag = tag
        self.agent = agent
        self.iterations = 0
        self.dirty = False

    def _append(self, record: Record) -> None:
        self.s.transcript.append(self.tag.marked(record))
        self.dirty = True

    async def _store(self) -> None:
        """Stores what this child recorded, then lets status (and so the API) know."""
        if self.dirty:
            self.dirty = False
            await self.s.sync()
            self.s.progress()

    async def _end(self, reason: str, error: str | None = None) -> None:
        record = AgentRecord(t=RecordType.AGENT, event="end", reason=reason, iterations=self.iterations)
        if error:
            record["error"] = error
        self._append(record)
        await self._store()

    async def run(self, task: str) -> ToolOutput:
        self._append(
            AgentRecord(t=RecordType.AGENT, event="start", task=task, maxIterations=self.s.settings.max_iterations)
        )
        messages = self.agent.initial_messages(task)
        for message in messages:
            self._append(MessageRecord(t=RecordType.MESSAGE, message=message))
        await self._store()
        stream = self.agent.run(messages)
        try:
            async for event in stream:
                outcome = await self._on(event)
                if outcome is not None:
                    return outcome
                if not isinstance(event, ev.ModelMessage):  # its message follows at once
                    await self._store()
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        await self._end("error", "the subagent stopped without an answer")
        return ToolOutput("error", error="the subagent stopped without an answer")

    async def _on(self, event: ev.AgentEvent) -> ToolOutput | None:
        match event:
            case ev.MessageAdded(message=message):
                self._append(MessageRecord(t=RecordType.MESSAGE, message=message))
            case ev.ModelMessage(reasoning=reasoning):
                self.iterations += 1
                if reasoning:
                    self._append(AgentRecord(t=RecordType.AGENT, event="reasoning", content=reasoning))
            case ev.ToolStarted():
                self._append(ToolStartedRecord(t=RecordType.TOOL_STARTED, id=event.call_id, digest=event.digest))
                await self._store()  # the intent is stored before the call runs
            case ev.ToolResult(status=status) if status != "approval_required":
                self._append(
                    ToolResultRecord(
                        t=RecordType.TOOL_RESULT,
                        id=event.call_id,
                        name=event.name,
                        status=status,
                        description=event.description,
                        digest=event.digest,
                    )
                )
            case ev.TokenCount():
                self._append(
                    TokensRecord(
                        t=RecordType.TOKENS,
                        promptTokens=event.prompt_tokens,
                        completionTokens=event.completion_tokens,
                        totalTokens=event.total_tokens,
                        cost=event.cost or 0.0,
                    )
                )
                await self.s.ledger.add(self.s.namespace, event.total_tokens, event.cost or 0.0)
                tokens, cost = self.s.usage()
                passed = run_budget_passed(self.s.spec, tokens, cost)
                if passed is None:
                    passed = await self.s.ledger.check(self.s.namespace)
                if passed is not None:
                    stopped = f"the subagent was stopped: {passed}"
                    await self._end("error", stopped)
                    return ToolOutput("error", error=stopped)
            case ev.ApprovalNeeded():  # gated tools never ask the engine; kept for safety
                await self._end("error", "a tool call needed an approval the subagent cannot ask for")
                return ToolOutput("error", error="the subagent needed an approval it cannot ask for")
            case ev.Answer():
                reason = "max_iterations" if self.iterations >= self.s.settings.max_iterations else "final"
                await self._end(reason)
                return ToolOutput("success", data=event.text or "(the subagent gave no answer)")
            case ev.AgentError():
                if event.reason == "MaxStepsReached":
                    await self._end("max_iterations")
                    return ToolOutput("error", error=f"the subagent did not answer within {self.iterations} iterations")
                await self._end("error", event.message)
                return ToolOutput("error", error=f"the subagent failed: {event.message}")
        return None
