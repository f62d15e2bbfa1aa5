"""Tool calls as the loop handles them: parsed from the model, run with a timeout, stored.

A call's arguments are kept as the exact JSON text the model sent, so a call approved after a
pause runs with exactly the parameters the user saw. Running never raises: a timeout or an
exception becomes an error result the model can read and react to.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lestrade.operator.tools.base import Tool, ToolOutput

__all__ = [
    "Call",
    "parse_arguments",
    "calls_of",
    "unresolved_calls",
    "tool_message",
    "describe",
    "execute",
]


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str
    params: dict[str, Any] | None
    """Parsed arguments; None when they were not a JSON object."""
    error: str | None = None

    def as_message_part(self) -> dict[str, Any]:
        """The OpenAI `tool_calls` entry of the assistant message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def parse_arguments(
    raw: str | Mapping[str, Any] | None,
) -> tuple[dict[str, Any] | None, str | None]:
    """(params, None) or (None, why the arguments are not a JSON object)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if isinstance(raw, Mapping):
        return dict(raw), None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {type(value).__name__}"
    return value, None


def _call(call_id: str, name: str, arguments: Any) -> Call:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    params, error = parse_arguments(text)
    return Call(call_id, name, text, params, error)


def calls_of(message: Mapping[str, Any]) -> list[Call]:
    """The tool calls of a stored assistant message."""
    return [
        _call(
            str(part.get("id")),
            str(part.get("function", {}).get("name", "")),
            part.get("function", {}).get("arguments"),
        )
        for part in message.get("tool_calls") or []
    ]


def unresolved_calls(messages: Sequence[Mapping[str, Any]]) -> list[Call]:
    """Calls of the last assistant message that have no tool result after it (a paused or
    interrupted turn); empty when the conversation is not in the middle of a turn."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"),
        None,
    )
    if last is None or any(m.get("role") != "tool" for m in messages[last + 1 :]):
        return []
    answered = {m.get("tool_call_id") for m in messages[last + 1 :]}
    return [c for c in calls_of(messages[last]) if c.id not in answered]


def tool_message(call: Call, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def describe(tool: Tool | None, call: Call) -> str:
    """The tool's one-line description of the call, or a generic one."""
    if tool is not None and call.params is not None:
        try:
            return str(tool.describe(call.params))
        except Exception:  # a describe bug must not break the run
            pass
    return f"{call.name} {call.arguments}"


async def execute(tool: Tool, params: dict[str, Any], timeout: float) -> ToolOutput:
    """Runs one call; timeouts and exceptions become error outputs."""
    try:
        async with asyncio.timeout(timeout):
            output = await tool.run(params)
    except TimeoutError:
        return ToolOutput("error", error=f"the tool did not finish within {timeout:g} s")
    except Exception as exc:  # the model should see the failure and adapt
        return ToolOutput("error", error=f"{type(exc).__name__}: {exc}")
    if not isinstance(output, ToolOutput):
        return ToolOutput("success", data=str(output))
    return output
