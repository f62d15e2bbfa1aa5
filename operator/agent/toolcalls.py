"""Tool calls as the loop handles them: parsed from the model, run with a timeout, stored.

A call's arguments are kept as the exact JSON text the model sent, so a call approved after a
pause runs with exactly the parameters the user saw. Running never raises: a timeout or an
exception becomes an error result the model can read and react to.

Approvals are bound to one call: every call gets an id unique within the run (`CallIds`: the
provider's id when it is well-formed and was never used in the run, else a fresh random one;
providers that omit ids, or repeat `call_0` in every turn, cannot make two calls share one), and
a decision carries the digest of the call's name and arguments (`call_digest`) that the person
saw; a decision whose digest does not match the call it names is not applied.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lestrade.operator.agent.tracing import fail, tracer
from lestrade.operator.tools.base import Tool, ToolOutput

__all__ = [
    "Call",
    "CallIds",
    "Decision",
    "call_digest",
    "used_call_ids",
    "parse_arguments",
    "calls_of",
    "unresolved_calls",
    "tool_message",
    "describe",
    "execute",
]


def call_digest(name: str, arguments: str) -> str:
    """`sha256:<hex>` of the tool name and the exact argument text: what a decision is about."""
    text = json.dumps([name, arguments], ensure_ascii=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str
    params: dict[str, Any] | None
    """Parsed arguments; None when they were not a JSON object."""
    error: str | None = None

    @functools.cached_property
    def digest(self) -> str:
        return call_digest(self.name, self.arguments)  # asked for at each step of the call

    def as_message_part(self) -> dict[str, Any]:
        """The OpenAI `tool_calls` entry of the assistant message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Decision:
    """A person's decision on one pending call; applies only to a call with this `digest`."""

    approved: bool
    reason: str | None = None
    digest: str | None = None

    @classmethod
    def of(cls, value: Decision | Mapping[str, Any] | Sequence[Any]) -> Decision:
        """From a Decision, `{"approved", "reason", "digest"}` or `(approved, reason[, digest])`."""
        if isinstance(value, Decision):
            return value
        if isinstance(value, Mapping):
            approved, reason, digest = (value.get(k) for k in ("approved", "reason", "digest"))
        else:
            approved, reason, digest = (*value, None, None)[:3]
        return cls(
            bool(approved),
            None if reason is None else str(reason),
            None if digest is None else str(digest),
        )

    def applies_to(self, call: Call) -> bool:
        return self.digest is not None and self.digest == call.digest


# Provider ids kept as they are: short and plain (they end up in status, Events and map keys;
# OpenAI refuses ids over 40 characters, Anthropic anything but [A-Za-z0-9_-]).
_PLAIN_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


class CallIds:
    """Hands out tool call ids unique within a run.

    `used` must hold every id the run ever used, also those compacted out of the working
    history: the engine seeds it with the ids of the messages, of the decisions and of the
    started calls it resumes with. A fresh id is random, so it cannot collide with an id that
    was forgotten either; it stays stable across a resume because the assistant message that
    carries it is stored.
    """

    def __init__(self, used: Iterable[str] = ()) -> None:
        self.used: set[str] = set(used)

    def assign(self, provider_id: str | None) -> str:
        call_id = provider_id or ""
        while not _PLAIN_ID.match(call_id) or call_id in self.used:
            call_id = f"call_lc{secrets.token_hex(8)}"
        self.used.add(call_id)
        return call_id


def used_call_ids(messages: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every tool call id the messages mention (in assistant calls and in tool results)."""
    ids: set[str] = set()
    for message in messages:
        for part in message.get("tool_calls") or []:
            ids.add(str(part.get("id")))
        if message.get("role") == "tool":
            ids.add(str(message.get("tool_call_id")))
    return ids


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


async def execute(tool: Tool, params: dict[str, Any], timeout: float, call: Call | None = None) -> ToolOutput:
    """Runs one call; timeouts and exceptions become error outputs. A tool with `run_call`
    (a harness session's tools: they need the call's id, and bound their own time because a
    relay may wait for a person) is given the call instead."""
    with tracer().start_as_current_span(f"execute_tool {tool.name}") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", tool.name)
        if call is not None:
            span.set_attribute("gen_ai.tool.call.id", call.id)
        output = await _execute(tool, params, timeout, call)
        # Outcome and size only: a tool's output is cluster data, never a span attribute.
        span.set_attribute("lestrade.tool.outcome", output.status)
        span.set_attribute("lestrade.tool.output_bytes", len(output.text().encode()))
        if output.status == "error":
            fail(span, "ToolError")
        return output


async def _execute(tool: Tool, params: dict[str, Any], timeout: float, call: Call | None) -> ToolOutput:
    run_call = getattr(tool, "run_call", None)
    try:
        async with asyncio.timeout(None if run_call is not None and call is not None else timeout):
            output = await (run_call(call, params) if run_call is not None and call is not None else tool.run(params))
    except TimeoutError:
        return ToolOutput("error", error=f"the tool did not finish within {timeout:g} s")
    except Exception as exc:  # the model should see the failure and adapt
        return ToolOutput("error", error=f"{type(exc).__name__}: {exc}")
    if not isinstance(output, ToolOutput):
        return ToolOutput("success", data=str(output))
    return output
