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

A toolset may be *deferred*: its tools are callable but their schemas are not sent until the
model opens it with the `open_toolset` meta-tool (whose description lists the closed toolsets,
one line each), because every offered schema is resent on every model call whether used or not.
Which toolsets are open is read from the history itself (`ToolRegistry.opened_in`: an
`open_toolset` call naming one, or a call of one of its tools), so a resumed run or a replay of
its transcript is offered exactly what the model had been offered.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["ToolStatus", "ToolOutput", "Tool", "Toolset", "ToolRegistry", "declared_read_only", "OPEN_TOOLSET"]

OPEN_TOOLSET = "open_toolset"

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
    deferred: bool = False
    """Offered only once the model opens it (see the module docstring); still callable before."""
    summary: str = ""
    """What the toolset is for, in one line of `open_toolset`'s listing (deferred toolsets)."""


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
        if name == OPEN_TOOLSET and self.deferred():
            return _Opener(self)
        return next((t for t in self.enabled_tools() if t.name == name), None)

    def deferred(self) -> list[Toolset]:
        """The enabled toolsets offered only once opened."""
        return [ts for ts in self.toolsets if ts.enabled and ts.deferred and ts.tools]

    def opened_in(self, messages: Iterable[Mapping[str, Any]]) -> frozenset[str]:
        """The deferred toolsets a history has opened: named by an `open_toolset` call, or one of
        whose tools it called (a model may call a tool it knows by name; that opens it too).
        Anything else a call names is ignored: opening only ever offers tools the run has."""
        deferred = {ts.name: ts for ts in self.deferred()}
        owner = {t.name: ts.name for ts in deferred.values() for t in ts.tools}
        opened: set[str] = set()
        for message in messages:
            if message.get("role") != "assistant":
                continue
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, Mapping) else None
                name = function.get("name") if isinstance(function, Mapping) else None
                if name == OPEN_TOOLSET:
                    wanted = _argument(function.get("arguments"), "name")  # type: ignore[union-attr]
                    if wanted in deferred:
                        opened.add(wanted)
                elif name in owner:
                    opened.add(owner[name])
        return frozenset(opened)

    def is_read_only(self, name: str, params: dict[str, Any] | None) -> bool:
        """Whether a call of the enabled tool `name` with `params` only reads (a read-only
        toolset's tools, or a tool that declares the call read-only); unparsed arguments never."""
        if params is None:
            return False
        if name == OPEN_TOOLSET:
            return True  # it only answers with text; the history is what opens a toolset
        for toolset in self.toolsets:
            if not toolset.enabled:
                continue
            for tool in toolset.tools:
                if tool.name == name:
                    return toolset.read_only or declared_read_only(tool, params)
        return False

    def offered_tools(self, opened: Collection[str] = ()) -> list[Tool]:
        """The tools whose schemas a model call carries: every enabled toolset's, a deferred
        one's only once `opened`, then `open_toolset` while a deferred toolset is closed."""
        tools = [t for ts in self.toolsets if ts.enabled and (not ts.deferred or ts.name in opened) for t in ts.tools]
        closed = [ts for ts in self.deferred() if ts.name not in opened]
        return [*tools, _Opener(self, closed)] if closed else tools

    def schemas(self, opened: Collection[str] = ()) -> list[dict[str, Any]]:
        """OpenAI-style tool definitions, as litellm takes them (see `offered_tools`)."""
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in self.offered_tools(opened)
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
        """The system prompt's part: the toolsets offered from the start (a deferred toolset's
        instructions are `open_toolset`'s answer, in the history from then on)."""
        return "\n\n".join(
            ts.instructions for ts in self.toolsets if ts.enabled and not ts.deferred and ts.instructions
        )


def _argument(arguments: Any, key: str) -> str | None:
    """One string argument of a stored call (arguments are a JSON text, or a dict)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    value = arguments.get(key) if isinstance(arguments, dict) else None
    return value if isinstance(value, str) else None


class _Opener:
    """`open_toolset`: answers with the toolset's instructions; the call itself, once in the
    history, is what makes the next model calls carry the toolset's schemas."""

    name = OPEN_TOOLSET
    read_only = True

    def __init__(self, registry: ToolRegistry, listed: list[Toolset] | None = None) -> None:
        self.registry = registry
        listed = registry.deferred() if listed is None else listed
        lines = ", ".join(f"{ts.name} ({ts.summary or ', '.join(t.name for t in ts.tools)})" for ts in listed)
        self.description = f"Offer a toolset from your next step on: {lines}."
        self.parameters = {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": [ts.name for ts in listed]}},
            "required": ["name"],
        }

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        return f"open toolset {params.get('name')}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        wanted = params.get("name")
        toolset = next((ts for ts in self.registry.deferred() if ts.name == wanted), None)
        if toolset is None:
            names = ", ".join(ts.name for ts in self.registry.deferred())
            return ToolOutput("error", error=f"no toolset {str(wanted)[:100]!r} to open; toolsets: {names}")
        tools = ", ".join(t.name for t in toolset.tools)
        text = f"Toolset {toolset.name} is open: {tools} from your next step on."
        return ToolOutput("success", f"{text}\n{toolset.instructions}" if toolset.instructions else text)
