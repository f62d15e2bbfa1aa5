"""Tools the client defines and runs itself (reference 000's frontend tools), per Conversation.

A `noop` tool answers at once with its canned response (the client acts on the call it saw in
the stream). A `pause` tool needs "approval": the turn pauses with the call waiting, the
client runs it and sends its output, which the API stores in `spec.frontendToolResults` next to
an approval in `spec.decisions`; the approved call then "runs" by returning that output. The
output is looked up by the call's name and arguments (a tool is not told its call id), so
identical calls in one pause share one output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lestrade.operator.tools.base import ToolOutput, Toolset

__all__ = ["FrontendTool", "frontend_toolset", "call_key"]

INSTRUCTIONS = (
    "Some tools run in the user's own application, not on the server (they are listed like "
    "any other tool). Call them when the user's request needs them; their output comes from "
    "that application."
)
NO_RESULT = "The client sent no output for this call."


def call_key(name: str, params: Mapping[str, Any]) -> str:
    return json.dumps([name, params], sort_keys=True, default=str)


@dataclass
class FrontendTool:
    name: str
    description: str
    parameters: dict[str, Any]
    mode: str = "pause"
    noop_response: str | None = None
    results: Mapping[str, str] = field(default_factory=dict)
    """call_key(name, params) -> the client's output, for pause calls."""

    @property
    def runs_in_client(self) -> bool:
        """A pause call waits for the client even when approvals are off for the run."""
        return self.mode == "pause"

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return self.mode == "pause"

    def describe(self, params: dict[str, Any]) -> str:
        return f"{self.name} {json.dumps(params, default=str)} (runs in the client)"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        if self.mode == "noop":
            return ToolOutput("success", self.noop_response or "Done.")
        result = self.results.get(call_key(self.name, params))
        return ToolOutput("success", result) if result is not None else ToolOutput("error", error=NO_RESULT)


def frontend_toolset(specs: list[Any], results: Mapping[str, str]) -> Toolset:
    """The Conversation's spec.frontendTools as a toolset; `results` by `call_key`."""
    tools = [
        FrontendTool(
            name=s.name,
            description=s.description,
            parameters=s.parameters or {"type": "object", "properties": {}},
            mode=s.mode,
            noop_response=s.noop_response,
            results=results,
        )
        for s in specs
    ]
    return Toolset("frontend", tools, instructions=INSTRUCTIONS)  # type: ignore[arg-type]
