"""Stateless replay: many conversations at once, each with its own position and fault counters."""

from __future__ import annotations

import asyncio
import json

import litellm

from lestrade.modelserver import ScriptedModelServer

CONVERSATIONS = 16


async def test_concurrent_conversations_are_independent(
    agent, model_server: ScriptedModelServer, scenario_name: str
) -> None:
    model_server.add_scenario(
        {
            "name": scenario_name,
            "vars": {"re_pod": r"pod (\S+)"},
            "steps": [
                {
                    "latency_ms": 20,
                    "tool_calls": [
                        {"name": "kubectl_describe", "arguments": {"name": "{{ match(re_pod, text=last_user) }}"}}
                    ],
                },
                {
                    "stream_chunk_ms": 5,
                    "fault": {"kind": "rate_limit", "times": 1},
                    "content": "{{ tool_args('kubectl_describe')['name'] }}: {{ tool_output('kubectl_describe') }}",
                },
            ],
        }
    )
    tools = {"kubectl_describe": lambda args: f"described {args['name']}"}

    async def converse(number: int) -> str:
        pod = f"web-{number}"
        try:
            await agent(scenario_name, f"look at pod {pod}", tools, stream=number % 2 == 0)
        except litellm.RateLimitError:
            pass  # the first request at step 1 of every conversation is rate limited once
        else:
            raise AssertionError("every conversation must hit its own rate limit once")
        run = await agent(scenario_name, f"look at pod {pod}", tools, stream=number % 2 == 1)
        return run.answer or ""

    answers = await asyncio.gather(*(converse(n) for n in range(CONVERSATIONS)))
    assert answers == [f"web-{n}: described web-{n}" for n in range(CONVERSATIONS)]
    bodies = model_server.requests(scenario_name)
    assert len(bodies) == CONVERSATIONS * 4  # step 0, step 1 (429), step 0 again, step 1
    first_users = [json.dumps(b["messages"][1]) for b in bodies]
    assert len(set(first_users)) == CONVERSATIONS
