"""Fake tools and event helpers for the agent tests: pure logic, no cluster.

Each fake tool records its calls, so tests can assert what ran and with which parameters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from lestrade.operator.agent import AgentEvent
from lestrade.operator.tools.base import ToolOutput, ToolRegistry, Toolset

__all__ = ["FakeTool", "Rendezvous", "registry", "collect", "of_kind", "final", "transcript"]


class FakeTool:
    """A tool whose output comes from `fn(params)` (sync or async); records every call."""

    def __init__(
        self,
        name: str,
        fn: Callable[[dict[str, Any]], Any] | None = None,
        *,
        approval: Callable[[dict[str, Any]], bool] | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.description = description or f"Fake tool {name}."
        self.parameters = parameters or {
            "type": "object",
            "properties": {"x": {"type": "string", "description": "anything"}},
        }
        self._fn = fn or (lambda params: f"{name} ok {params}")
        self._approval = approval
        self.calls: list[dict[str, Any]] = []

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return bool(self._approval and self._approval(params))

    def describe(self, params: dict[str, Any]) -> str:
        return f"{self.name} {params}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        self.calls.append(params)
        result = self._fn(params)
        if isinstance(result, Awaitable):
            result = await result
        return result if isinstance(result, ToolOutput) else ToolOutput("success", str(result))


class Rendezvous:
    """Completes only when `parties` callers are inside it at once (proves concurrency)."""

    def __init__(self, parties: int, timeout: float = 5.0) -> None:
        self.parties = parties
        self.timeout = timeout
        self.arrived = 0
        self._all_here = asyncio.Event()

    async def __call__(self, params: dict[str, Any]) -> str:
        self.arrived += 1
        if self.arrived >= self.parties:
            self._all_here.set()
        await asyncio.wait_for(self._all_here.wait(), self.timeout)
        return f"met {params.get('x')}"


def registry(*tools: FakeTool, instructions: str = "") -> ToolRegistry:
    return ToolRegistry([Toolset(name="fake", tools=list(tools), instructions=instructions)])


async def collect(stream: Any) -> list[AgentEvent]:
    return [event async for event in stream]


def of_kind(events: list[AgentEvent], kind: str) -> list[Any]:
    return [e for e in events if e.kind == kind]


def final(events: list[AgentEvent]) -> Any:
    """The terminal event (answer, approval_needed or error); asserts there is exactly one."""
    ends = [e for e in events if e.kind in ("answer", "approval_needed", "error")]
    assert len(ends) == 1, ends
    assert events[-1] is ends[0]
    return ends[0]


def transcript(events: list[AgentEvent], start: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation a consumer rebuilds from MessageAdded (and Compaction) events."""
    messages = list(start)
    for event in events:
        if event.kind == "compaction":
            messages = list(event.messages)
        elif event.kind == "message":
            assert event.index == len(messages)
            messages.append(event.message)
    return messages
