"""Helpers for driving the scripted model server through litellm's real client.

`agent` is a minimal tool-calling loop (call the model, run the scripted tools, append their
outputs, repeat) — just enough to replay multi-step scenarios the way the real agent does.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import litellm
import pytest

import lestrade  # noqa: F401  (offline litellm/tiktoken settings before litellm is imported)
from lestrade.modelserver import ScriptedModelServer

NO_RETRIES = {"num_retries": 0, "max_retries": 0}


@dataclass
class Turn:
    """What one model call returned, assembled from the stream when streaming."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    reasoning: str | None = None
    usage: Any = None
    chunks: list[Any] = field(default_factory=list)


async def complete(
    server: ScriptedModelServer, name: str, messages: list[dict[str, Any]], *, stream: bool = False, **kw: Any
) -> Turn:
    """One litellm.acompletion call; streamed deltas are assembled by hand (by tool index)."""
    params = {**server.litellm_params(name), **NO_RETRIES, **kw}
    if not stream:
        response = await litellm.acompletion(messages=messages, **params)
        message = response.choices[0].message
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []
        ]
        return Turn(message.content, calls, getattr(message, "reasoning_content", None), response.usage)
    response = await litellm.acompletion(messages=messages, stream=True, **params)
    content, reasoning, usage = "", "", None
    slots: dict[int, dict[str, Any]] = {}
    chunks = []
    async for chunk in response:
        chunks.append(chunk)
        usage = getattr(chunk, "usage", None) or usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += getattr(delta, "reasoning_content", None) or ""
        for call in delta.tool_calls or []:
            slot = slots.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = call.id or slot["id"]
            slot["name"] += call.function.name or ""
            slot["arguments"] += call.function.arguments or ""
    calls = [slots[i] for i in sorted(slots)]
    return Turn(content or None, calls, reasoning or None, usage, chunks)


Tools = dict[str, Callable[[dict[str, Any]], str]]


@dataclass
class AgentRun:
    answer: str | None
    messages: list[dict[str, Any]]
    turns: list[Turn]


async def run_agent(
    server: ScriptedModelServer,
    name: str,
    user: str,
    tools: Tools,
    *,
    stream: bool = False,
    system: str = "You are a Kubernetes troubleshooter.",
    max_steps: int = 8,
    **kw: Any,
) -> AgentRun:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    turns = []
    for _ in range(max_steps):
        turn = await complete(server, name, messages, stream=stream, **kw)
        turns.append(turn)
        if not turn.tool_calls:
            return AgentRun(turn.content, messages, turns)
        messages.append(
            {
                "role": "assistant",
                "content": turn.content,
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in turn.tool_calls
                ],
            }
        )
        for call in turn.tool_calls:
            output = tools[call["name"]](json.loads(call["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    raise AssertionError(f"no final answer after {max_steps} steps")


@pytest.fixture
def agent(model_server: ScriptedModelServer) -> Callable[..., Awaitable[AgentRun]]:
    async def run(name: str, user: str, tools: Tools, **kw: Any) -> AgentRun:
        return await run_agent(model_server, name, user, tools, **kw)

    return run


@pytest.fixture
def llm(model_server: ScriptedModelServer) -> Callable[..., Awaitable[Turn]]:
    """`await llm(scenario, messages, stream=False, **litellm_kwargs)` against the session server."""

    async def call(name: str, messages: list[dict[str, Any]], **kw: Any) -> Turn:
        return await complete(model_server, name, messages, **kw)

    return call
