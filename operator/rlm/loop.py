"""The model-facing rlm loop: ask the model, run its code in the sandboxed REPL, repeat.

    outcome = await run_rlm(messages, tools=[...], hooks=RlmHooks(...), max_iterations=10)

The harness owns everything around the loop: the model (`complete`), the permission rules and
relays (`call_tool`), recursion and its depth (`llm_query`), and how events reach the client
(`emit`, given an event type and its fields; the harness adds runId, agentId, parentId, depth).
Events per iteration, in order: `reasoning` {content} (when the model shows it), `text`
{content}, `usage` {the reply's usage}, then for a code block `tool_call` {id, name: "repl",
input: {code}} and `tool_result` {id, name: "repl", output}. Calls the code makes
(`llm_query`, tools) go through the hooks; the harness reports those as it does for any call.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lestrade.operator.rlm.contract import RlmOutcome, RlmReply, ToolSpec
from lestrade.operator.rlm.prompt import code_of, final_of, observation, system_prompt
from lestrade.operator.rlm.repl import LLM_QUERY, Repl
from lestrade.operator.rlm.sandbox import SandboxLimits

__all__ = ["RlmHooks", "run_rlm", "REPL_TOOL"]

REPL_TOOL = "repl"


@dataclass
class RlmHooks:
    complete: Callable[[list[dict[str, Any]]], Awaitable[RlmReply]]
    """One model call on the conversation so far."""
    call_tool: Callable[[str, dict[str, Any]], Awaitable[str]]
    """Runs a tool for the code under the harness's permission rules; may raise ToolDenied."""
    llm_query: Callable[[str], Awaitable[str]]
    """A recursive model call at depth + 1; may raise DepthExceeded."""
    emit: Callable[[str, dict[str, Any]], Awaitable[None]]
    """Reports one harness event (type, fields)."""


async def run_rlm(
    messages: list[dict[str, Any]],
    *,
    tools: list[ToolSpec],
    hooks: RlmHooks,
    max_iterations: int,
    limits: SandboxLimits | None = None,
) -> RlmOutcome:
    """Runs until the model answers or `max_iterations` model replies have been used.
    `SandboxUnavailable` (before any model call) when this kernel cannot confine the REPL."""
    if max_iterations < 1:
        raise ValueError("max_iterations must be at least 1")
    limits = limits or SandboxLimits()
    tool_names = {t.name for t in tools}

    async def on_call(name: str, args: dict[str, Any]) -> str:
        if name == LLM_QUERY:
            return await hooks.llm_query(args["prompt"])
        if name in tool_names:
            return await hooks.call_tool(name, args)
        raise LookupError(f"no function {name!r}")  # the REPL refuses unknown names before this

    conversation = [
        {"role": "system", "content": system_prompt(tools, max_output=limits.max_output, iterations=max_iterations)},
        *messages,
    ]
    last_text = ""
    async with Repl(limits, functions=tools) as repl:
        for iteration in range(1, max_iterations + 1):
            reply = await hooks.complete(list(conversation))
            if reply.reasoning:
                await hooks.emit("reasoning", {"content": reply.reasoning})
            if reply.text:
                await hooks.emit("text", {"content": reply.text})
            if reply.usage:
                await hooks.emit("usage", dict(reply.usage))
            last_text = reply.text or ""
            conversation.append({"role": "assistant", "content": last_text})
            code = code_of(last_text)
            if code is None:
                return RlmOutcome("final", final_of(last_text), iteration)
            call_id = f"repl_{uuid.uuid4().hex[:12]}"
            await hooks.emit("tool_call", {"id": call_id, "name": REPL_TOOL, "input": {"code": code}})
            result = await repl.execute(code, on_call)
            output = result.text()
            await hooks.emit("tool_result", {"id": call_id, "name": REPL_TOOL, "output": output})
            if result.final is not None:
                return RlmOutcome("final", result.final, iteration)
            conversation.append({"role": "user", "content": observation(output)})
    return RlmOutcome("max_iterations", final_of(last_text), max_iterations)
