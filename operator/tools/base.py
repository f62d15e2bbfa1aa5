"""What every tool and toolset looks like to the agent loop.

A tool is a named, JSON-schema-described async function that returns text a model reads well.
Whether a call may run unattended is the tool's own decision (`needs_approval`), because only
the tool knows which of its inputs are safe (a read-only bash pipeline vs. `rm`). The loop never
runs a call that needs approval until a decision approves that exact stored call.

Whether a call is *read-only* (has no effect outside the run, so running it twice is harmless)
is also the tool's own word: a tool says so with a `read_only` attribute (a bool, or a function
of the call's parameters, as for bash, where only the unattended commands are reads), or its
toolset says it for all its tools. After a restart, a read-only call whose result was not
stored is simply run again; any other call that may have started is reported as "outcome
unknown". Nothing is read-only unless declared so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["ToolStatus", "ToolOutput", "Tool", "Toolset", "ToolRegistry", "declared_read_only"]

ToolStatus = Literal["success", "error", "no_data"]


@dataclass(frozen=True)
class ToolOutput:
    status: ToolStatus
    data: str = ""
    error: str | None = None

    def text(self) -> str:
        """What the model sees."""
        if self.status == "error":
            return f"Error: {self.error or self.data}"
        if self.status == "no_data" and not self.data:
            return "No data returned."
        return self.data


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object

    def needs_approval(self, params: dict[str, Any]) -> bool: ...

    def describe(self, params: dict[str, Any]) -> str:
        """One human line for this call, e.g. `kubectl describe pod web-1 -n shop`."""
        ...

    async def run(self, params: dict[str, Any]) -> ToolOutput: ...


@dataclass
class Toolset:
    """A group of tools with the prompt text that teaches the model to use them."""

    name: str
    tools: list[Tool]
    instructions: str = ""
    enabled: bool = True
    read_only: bool = False
    """Every tool of the set only reads (see the module docstring); a tool may say so itself."""


def declared_read_only(tool: Tool, params: dict[str, Any]) -> bool:
    """The tool's own `read_only` declaration for this call (False when it makes none, or
    when its check fails: in doubt a call is treated as one that may have an effect)."""
    flag = getattr(tool, "read_only", False)
    try:
        return bool(flag(params)) if callable(flag) else flag is True
    except Exception:
        return False


@dataclass
class ToolRegistry:
    toolsets: list[Toolset] = field(default_factory=list)

    def enabled_tools(self) -> list[Tool]:
        return [tool for ts in self.toolsets if ts.enabled for tool in ts.tools]

    def get(self, name: str) -> Tool | None:
        return next((t for t in self.enabled_tools() if t.name == name), None)

    def is_read_only(self, name: str, params: dict[str, Any] | None) -> bool:
        """Whether a call of the enabled tool `name` with `params` only reads (a read-only
        toolset's tools, or a tool that declares the call read-only); unparsed arguments never."""
        if params is None:
            return False
        for toolset in self.toolsets:
            if not toolset.enabled:
                continue
            for tool in toolset.tools:
                if tool.name == name:
                    return toolset.read_only or declared_read_only(tool, params)
        return False

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style tool definitions, as litellm takes them."""
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in self.enabled_tools()
        ]

    async def offered(self) -> ToolRegistry:
        """This registry without the tools that say they cannot work here (a tool's optional
        `available()`; a check that fails keeps the tool: it then reports its own error)."""

        async def works(tool: Tool) -> bool:
            check = getattr(tool, "available", None)
            if check is None:
                return True
            try:
                return bool(await check())
            except Exception:  # noqa: BLE001 — in doubt, offer it
                return True

        toolsets = []
        for ts in self.toolsets:
            if not ts.enabled:
                toolsets.append(ts)
                continue
            keep = [t for t in ts.tools if await works(t)]
            toolsets.append(ts if len(keep) == len(ts.tools) else replace(ts, tools=keep))
        return ToolRegistry(toolsets=toolsets)

    def instructions(self) -> str:
        return "\n\n".join(ts.instructions for ts in self.toolsets if ts.enabled and ts.instructions)
