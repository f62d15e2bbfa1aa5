"""One turn: the tool calls of one assistant message, decided, run concurrently, reported.

Every call is first decided: unknown tool, broken arguments, refused by the loop guard, needs
approval, approved or denied by the user (a decision counts only when its digest matches the
call's name and arguments), interrupted by a crash (launched before: outcome unknown, unless
the tool declares the call read-only, which is then simply run again), or run. The calls to run
are announced with `ToolStarted` and then `ToolsStarting` *before* any of them starts (a consumer
that persists them before asking for the next event stores the whole turn's intents in one
write), then run together under the tool and run timeouts; a call that may have an effect is
first passed to `before_launch` (the consumer stores its "launched" mark), read-only calls launch
at once. Results are added to the conversation in the order the model asked. Calls that need a
decision are left without a result and the turn pauses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from lestrade.operator.agent.events import (
    AgentEvent,
    ApprovalNeeded,
    MessageAdded,
    PendingApproval,
    ToolResult,
    ToolsStarting,
    ToolStarted,
    Truncation,
)
from lestrade.operator.agent.guard import LoopGuard
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.toolcalls import Call, Decision, describe, execute, tool_message
from lestrade.operator.agent.window import truncate_tool_output
from lestrade.operator.tools.base import Tool, ToolOutput, ToolRegistry

__all__ = ["StopRun", "Turn", "OUTCOME_UNKNOWN", "DECISION_MISMATCH", "BeforeLaunch"]

OUTCOME_UNKNOWN = (
    "Outcome unknown: the operator restarted while this ran; it was not re-run. Check its "
    "effect before calling it again."
)

BeforeLaunch = Callable[[Call], Awaitable[None]]
"""Called right before a call that may have an effect launches; the call waits for it (and
does not run if it raises)."""


DECISION_MISMATCH = (
    "Error: the decision given for this call id was made for a different call (another tool "
    "or other arguments), so it was not applied and the call was not run."
)


class StopRun(Exception):
    """Ends the run with `AgentError(reason, message)`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class _Decided:
    status: str
    output: str


class Turn:
    def __init__(
        self,
        *,
        registry: ToolRegistry,
        limits: Limits,
        guard: LoopGuard,
        approvals: bool,
        deadline: float | None,
        output_budget: int,
        model: str,
        before_launch: BeforeLaunch | None = None,
    ) -> None:
        self.registry = registry
        self.limits = limits
        self.guard = guard
        self.approvals = approvals
        self.deadline = deadline
        self.output_budget = max(output_budget, 16)
        self.model = model
        self.before_launch = before_launch
        self.pending: list[PendingApproval] = []
        self.outputs: list[str] = []
        self.truncations: list[Truncation] = []

    @property
    def paused(self) -> bool:
        return bool(self.pending)

    def approval_event(self) -> ApprovalNeeded:
        return ApprovalNeeded(pending=list(self.pending))

    def _needs_approval(self, tool: Tool, params: dict[str, Any]) -> bool:
        try:
            return bool(tool.needs_approval(params))
        except Exception:  # when in doubt, a human decides
            return True

    def _decide(
        self,
        call: Call,
        tool: Tool | None,
        decisions: Mapping[str, Decision],
        started: Collection[str],
    ) -> _Decided | None:
        """A result decided without running, "pending", or None (run it)."""
        if call.id in started and not self.registry.is_read_only(call.name, call.params):
            # A tool that can tell what became of an interrupted call (the harness's `agent`
            # tool: what its subagent did before the restart) says so instead.
            told = getattr(tool, "interrupted", None)
            text = told(call) if callable(told) else None
            return _Decided("error", text if isinstance(text, str) and text else OUTCOME_UNKNOWN)
        if tool is None:
            known = ", ".join(t.name for t in self.registry.enabled_tools())
            return _Decided("error", f"Error: unknown tool `{call.name}`. Available: {known}")
        if call.params is None:
            return _Decided("error", f"Error: the arguments were not a JSON object ({call.error})")
        if call.id in decisions:
            decision = decisions[call.id]
            if not decision.applies_to(call):
                return _Decided("error", DECISION_MISMATCH)
            if decision.approved:
                return None
            why = f" Reason: {decision.reason}" if decision.reason else ""
            return _Decided("denied", f"The user denied this tool call; it was not run.{why}")
        if refusal := self.guard.refuse(call.name, call.params):
            return _Decided("error", f"Error: {refusal}")
        if self._needs_approval(tool, call.params):
            # A tool the client runs (a frontend tool) always waits for the client's output.
            if self.approvals or getattr(tool, "runs_in_client", False):
                return _Decided("approval_required", "")
            return _Decided(
                "error",
                "Error: this call needs a user's approval and approvals are disabled for this "
                "run, so it was not run. Use a call that needs no approval, or say in your "
                "answer what should be run.",
            )
        return None

    async def _launch(self, call: Call, tool: Tool) -> ToolOutput:
        if self.before_launch is not None and not self.registry.is_read_only(call.name, call.params):
            await self.before_launch(call)
        return await execute(tool, call.params or {}, self.limits.tool_timeout, call)

    async def _run_all(self, work: list[tuple[Call, Tool]]) -> list[ToolOutput]:
        jobs = [self._launch(call, tool) for call, tool in work]
        try:
            async with asyncio.timeout_at(self.deadline):
                return list(await asyncio.gather(*jobs))
        except TimeoutError as exc:
            raise StopRun("Timeout", "the run's overall timeout passed while tools ran") from exc

    async def _finish(self, call: Call, output: str) -> tuple[str, Truncation | None]:
        if len(output.encode()) <= self.output_budget:  # a token is at least one byte
            return output, None
        return await asyncio.to_thread(truncate_tool_output, output, call.id, call.name, self.output_budget, self.model)

    async def run(
        self,
        calls: list[Call],
        decisions: Mapping[str, Decision],
        started: Collection[str],
        add: Callable[[dict[str, Any]], MessageAdded],
    ) -> AsyncIterator[AgentEvent]:
        decided: dict[str, _Decided] = {}
        work: list[tuple[Call, Tool]] = []
        tools = {c.id: self.registry.get(c.name) for c in calls}
        for call in calls:
            tool = tools[call.id]
            verdict = self._decide(call, tool, decisions, started)
            if verdict is not None:
                decided[call.id] = verdict
            elif tool is not None and call.params is not None:
                self.guard.record_call(call.name, call.params)
                work.append((call, tool))
        read_only = [self.registry.is_read_only(call.name, call.params) for call, _ in work]
        for (call, tool), reads in zip(work, read_only, strict=True):
            yield ToolStarted(call.id, call.name, call.params or {}, describe(tool, call), call.digest, read_only=reads)
        if work:
            yield ToolsStarting([call.id for call, _ in work], may_act=not all(read_only))
        ran = dict(zip((c.id for c, _ in work), await self._run_all(work), strict=True))
        for call in calls:
            tool = tools[call.id]
            params = call.params or {}
            if call.id in ran:
                out = ran[call.id]
                status, output = out.status, out.text()
            elif decided[call.id].status == "approval_required":
                self.pending.append(PendingApproval(call.id, call.name, describe(tool, call), params, call.digest))
                yield ToolResult(
                    call.id,
                    call.name,
                    "approval_required",
                    "",
                    params,
                    describe(tool, call),
                    digest=call.digest,
                )
                continue
            else:
                status, output = decided[call.id].status, decided[call.id].output  # type: ignore[assignment]
            output, cut = await self._finish(call, output)
            if cut:
                self.truncations.append(cut)
            self.outputs.append(output)
            yield ToolResult(
                call_id=call.id,
                name=call.name,
                status=status,
                output=output,
                params=params,
                description=describe(tool, call),
                truncated=cut is not None,
                original_tokens=cut.original_token_count if cut else None,
                truncation=cut,
                digest=call.digest,
            )
            yield add(tool_message(call, output))
