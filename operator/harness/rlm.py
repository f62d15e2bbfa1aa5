"""The `rlm` mode of a harness session: `lestrade.operator.rlm.run_rlm` with the session's hooks.

The loop and its sandboxed REPL are `lestrade.operator.rlm`'s; this module gives them what the
session owns:

- `complete`: a model call with the session's model and limits; its token count is a `tokens`
  record of the turn, so `spec.maxTokens`/`maxCost` and the namespace ledger bound the loop;
- `call_tool`: the code's tool calls go through the session's `Gate` exactly like an agent's
  (rules, else a relay the person answers); a refusal raises `ToolDenied` in the code. Each
  call is recorded (`tool_started` before it runs, then its result) and reported as
  `tool_call`/`tool_result` events;
- `llm_query`: a plain model call on the prompt alone, refused with `DepthExceeded` when depth
  + 1 passes `maxDepth`;
- `emit`: each event of the loop is an `agent` record with `event: emit`, which the API passes
  on with the run's ids.

The loop's conversation is its own (not stored as messages): an attempt that resumes after a
restart runs the loop again from the question, unless the answer was already recorded.
Spent `allowOnce` rules and decisions stay spent (they are transcript records).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from lestrade.operator.agent.model import ModelReply, complete
from lestrade.operator.agent.tokens import context_limits
from lestrade.operator.agent.toolcalls import Call
from lestrade.operator.base.budgets import run_budget_passed
from lestrade.operator.harness.agents import AGENT_TOOL, Subagents
from lestrade.operator.harness.gate import MAIN_AGENT, AgentTag
from lestrade.operator.rlm import DepthExceeded, RlmHooks, RlmOutcome, RlmReply, ToolDenied, ToolSpec, run_rlm
from lestrade.runs.records import AgentRecord, Record, TokensRecord, ToolResultRecord, ToolStartedRecord
from lestrade.runs.transcript import RecordType

__all__ = ["RlmStopped", "run_rlm_session"]


class RlmStopped(Exception):
    """The session's budget was passed during the loop: the turn fails with `reason`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class _Session:
    def __init__(self, subagents: Subagents, tag: AgentTag) -> None:
        self.s = subagents
        self.tag = tag
        self.registry = subagents.registry_for(tag)
        self.context = context_limits(subagents.model.settings, subagents.limits)

    async def _record(self, record: Record) -> None:
        self.s.transcript.append(self.tag.marked(record))
        await self.s.sync()
        self.s.progress()

    async def emit(self, event_type: str, fields: dict[str, Any]) -> None:
        await self._record(AgentRecord(t=RecordType.AGENT, event="emit", type=event_type, fields=dict(fields)))

    async def _model(self, messages: list[dict[str, Any]]) -> ModelReply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, self.s.deadline - time.time())
        reply: ModelReply | None = None
        async for item in complete(
            self.s.model.settings,
            messages,
            max_tokens=self.context.max_output,
            limits=self.s.limits,
            deadline=deadline,
        ):
            if isinstance(item, ModelReply):
                reply = item
        assert reply is not None
        usage = reply.usage
        await self._record(
            TokensRecord(
                t=RecordType.TOKENS,
                promptTokens=usage.get("prompt_tokens", 0),
                completionTokens=usage.get("completion_tokens", 0),
                totalTokens=usage.get("total_tokens", 0),
                cost=reply.cost,
            )
        )
        await self.s.ledger.add(self.s.namespace, int(usage.get("total_tokens", 0)), reply.cost)
        tokens, cost = self.s.usage()
        passed = run_budget_passed(self.s.spec, tokens, cost)
        if passed is not None:
            raise RlmStopped("BudgetExceeded", f"Stopped: {passed}; what it found so far is kept")
        passed = await self.s.ledger.check(self.s.namespace)
        if passed is not None:
            raise RlmStopped("NamespaceBudgetExhausted", f"Stopped: {passed}; what it found so far is kept")
        return reply

    async def complete(self, messages: list[dict[str, Any]]) -> RlmReply:
        reply = await self._model(messages)
        # Usage reaches the client from the `tokens` record (as for agents), so not twice here.
        return RlmReply(text=reply.content or "", reasoning=reply.reasoning or "", usage={})

    async def llm_query(self, prompt: str) -> str:
        if self.tag.depth + 1 > self.s.settings.max_depth:
            raise DepthExceeded(
                f"llm_query is not available at depth {self.tag.depth + 1} (maxDepth {self.s.settings.max_depth})"
            )
        reply = await self._model([{"role": "user", "content": prompt}])
        return reply.content or ""

    async def call_tool(self, name: str, params: dict[str, Any]) -> str:
        tool = self.registry.get(name)
        run_call = getattr(tool, "run_call", None)
        if tool is None or run_call is None or name == AGENT_TOOL:
            raise ToolDenied(f"no tool {name!r} in this session")
        call = Call(self.s.call_ids.assign(None), name, json.dumps(params, sort_keys=True), dict(params))
        await self.emit("tool_call", {"id": call.id, "name": name, "input": dict(params)})
        await self._record(ToolStartedRecord(t=RecordType.TOOL_STARTED, id=call.id, digest=call.digest))
        output = await run_call(call, dict(params))
        await self._record(
            ToolResultRecord(
                t=RecordType.TOOL_RESULT,
                id=call.id,
                name=name,
                status=output.status,
                description=tool.describe(params),
                digest=call.digest,
            )
        )
        if output.status == "denied":
            reason = self.s.transcript.state.decisions.get(call.id, {}).get("reason") or "denied"
            await self.emit(
                "tool_result", {"id": call.id, "name": name, "output": {"status": "denied", "reason": reason}}
            )
            raise ToolDenied(str(reason))
        text = output.text()
        result: Any = {"error": output.error or output.data} if output.status == "error" else text
        await self.emit("tool_result", {"id": call.id, "name": name, "output": result})
        return text


async def run_rlm_session(
    subagents: Subagents, messages: list[dict[str, Any]], tag: AgentTag = MAIN_AGENT
) -> RlmOutcome:
    """Runs the rlm loop for the session's question; raises `RlmStopped` (budget),
    `SandboxUnavailable` (no sandbox on this kernel) or the model's `ModelCallError`."""
    session = _Session(subagents, tag)
    tools = [ToolSpec.of(t) for t in subagents.base.enabled_tools()]
    hooks = RlmHooks(
        complete=session.complete,
        call_tool=session.call_tool,
        llm_query=session.llm_query,
        emit=session.emit,
    )
    return await run_rlm(messages, tools=tools, hooks=hooks, max_iterations=subagents.settings.max_iterations)
