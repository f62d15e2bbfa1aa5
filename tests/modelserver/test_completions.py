"""Chat completions through litellm's real client: text, tool calls, usage, positions, latency."""

from __future__ import annotations

import json
import time

import httpx
import litellm
import pytest

from lestrade.modelserver import Scenario, ScriptedModelServer, Step, ToolCall
from lestrade.modelserver.wire import count_tokens

USER = [{"role": "user", "content": "why is web crashing?"}]

THREE_CALLS = Step(
    tool_calls=[
        ToolCall(name="kubectl_describe", arguments={"kind": "pod", "name": "web", "namespace": "shop"}),
        ToolCall(name="kubectl_previous_logs", arguments={"name": "web", "namespace": "shop"}),
        ToolCall(
            name="kubectl_events",
            arguments={"resource_type": "pod", "pod_name": "web", "namespace": "shop"},
            id="my-id",
        ),
    ]
)


def test_sync_completion_returns_text_and_usage(model_server: ScriptedModelServer, scenario_name: str) -> None:
    text = "The pod web is crash-looping because its config file is missing."
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=text)]))
    response = litellm.completion(messages=USER, **model_server.litellm_params(scenario_name))
    assert response.choices[0].message.content == text
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.completion_tokens == count_tokens(text)
    # 3 framing + 4 per message + the text: roughly what the request holds
    assert response.usage.prompt_tokens == 3 + 4 + count_tokens(USER[0]["content"])
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


async def test_streamed_text_arrives_in_several_chunks_with_usage_chunk(llm, model_server, scenario_name) -> None:
    text = "First line of a long answer.\nSecond line with more words than one chunk holds."
    model_server.add_scenario({"name": scenario_name, "steps": [text]})
    turn = await llm(scenario_name, USER, stream=True, stream_options={"include_usage": True})
    assert turn.content == text
    assert sum(1 for c in turn.chunks if c.choices and c.choices[0].delta.content) >= 3
    assert turn.usage is not None and turn.usage.completion_tokens == count_tokens(text)


async def test_stream_without_include_usage_sends_no_usage_chunk(model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": ["hi"]})
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{model_server.base_url}/chat/completions",
            json={"model": scenario_name, "messages": USER, "stream": True},
        )
    events = [line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ")]
    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("stream", [False, True])
async def test_several_tool_calls_in_one_turn(llm, model_server, scenario_name, stream) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[THREE_CALLS]))
    turn = await llm(scenario_name, USER, stream=stream)
    assert [c["name"] for c in turn.tool_calls] == ["kubectl_describe", "kubectl_previous_logs", "kubectl_events"]
    assert [json.loads(c["arguments"]) for c in turn.tool_calls] == [c.arguments for c in THREE_CALLS.tool_calls]
    ids = [c["id"] for c in turn.tool_calls]
    assert ids[2] == "my-id" and len(set(ids)) == 3 and all(ids)


async def test_streamed_tool_calls_are_indexed_deltas(model_server, scenario_name) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[THREE_CALLS]))
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{model_server.base_url}/chat/completions",
            json={"model": scenario_name, "messages": USER, "stream": True},
        )
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    for index in range(3):
        mine = [d for d in deltas if d["index"] == index]
        assert mine[0]["id"] and mine[0]["function"]["name"] and mine[0]["function"]["arguments"] == ""
        assert len(mine) > 2  # the arguments arrive in fragments
        assert all("id" not in d and "name" not in d["function"] for d in mine[1:])
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_reasoning_is_returned(llm, model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": [{"content": "done", "reasoning": "look at the logs"}]})
    assert (await llm(scenario_name, USER)).reasoning == "look at the logs"
    assert (await llm(scenario_name, USER, stream=True)).reasoning == "look at the logs"


async def test_step_is_the_number_of_assistant_messages(llm, model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": ["zero", "one", "two"]})
    history = list(USER)
    seen = []
    for _ in range(4):
        turn = await llm(scenario_name, history)
        seen.append(turn.content)
        history += [{"role": "assistant", "content": turn.content}, {"role": "user", "content": "and?"}]
    assert seen == ["zero", "one", "two", "two"]  # past the end, the last step repeats


async def test_turn_counting_restarts_at_each_user_message(llm, model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "step_counting": "turn", "steps": ["first", "second"]})
    history = USER + [{"role": "assistant", "content": "first"}, {"role": "user", "content": "again"}]
    assert (await llm(scenario_name, history)).content == "first"
    history += [{"role": "assistant", "content": "first"}]
    history += [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    assert (await llm(scenario_name, history)).content == "second"


async def test_after_last_error_is_a_bad_request(llm, model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "after_last": "error", "steps": ["only"]})
    history = USER + [{"role": "assistant", "content": "only"}, {"role": "user", "content": "more"}]
    with pytest.raises(litellm.BadRequestError, match="has 1 step"):
        await llm(scenario_name, history)


async def test_unknown_scenario_is_not_found(llm) -> None:
    with pytest.raises(litellm.NotFoundError, match="no scenario named"):
        await llm("no-such-scenario", USER)


async def test_usage_override(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {"name": scenario_name, "steps": [{"content": "x", "usage": {"prompt_tokens": 120000, "completion_tokens": 7}}]}
    )
    usage = (await llm(scenario_name, USER)).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (120000, 7, 120007)
    streamed = await llm(scenario_name, USER, stream=True, stream_options={"include_usage": True})
    assert streamed.usage.prompt_tokens == 120000


async def test_requests_are_recorded(llm, model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": ["ok"]})
    tools = [{"type": "function", "function": {"name": "kubectl_describe", "parameters": {"type": "object"}}}]
    await llm(scenario_name, USER, max_tokens=321, tools=tools)
    [body] = model_server.requests(scenario_name)
    assert body["model"] == scenario_name
    assert body["max_tokens"] == 321
    assert body["messages"] == USER
    assert body["tools"][0]["function"]["name"] == "kubectl_describe"
    assert all(b["model"] != scenario_name for b in model_server.requests("demo"))
    model_server.reset(scenario_name)
    assert model_server.requests(scenario_name) == []


async def test_models_endpoint_lists_scenarios(model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": ["ok"]})
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{model_server.base_url}/models")
    assert response.status_code == 200
    ids = {m["id"] for m in response.json()["data"]}
    assert {"demo", scenario_name} <= ids


async def test_step_latency_delays_the_answer(llm, model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": [{"content": "slow", "latency_ms": 400}]})
    started = time.monotonic()
    assert (await llm(scenario_name, USER)).content == "slow"
    assert time.monotonic() - started >= 0.4


async def test_stream_chunk_delay_spaces_the_chunks(llm, model_server, scenario_name) -> None:
    text = "one two three four five six seven eight nine ten eleven twelve"
    model_server.add_scenario({"name": scenario_name, "steps": [{"content": text, "stream_chunk_ms": 60}]})
    started = time.monotonic()
    turn = await llm(scenario_name, USER, stream=True)
    chunk_count = len(turn.chunks)
    assert turn.content == text
    assert time.monotonic() - started >= 0.06 * (chunk_count - 2)


def test_default_latency_applies_to_every_step() -> None:
    scenario = Scenario(name="plain", steps=[Step(content="hello")])
    with ScriptedModelServer([scenario], latency_ms=300, include_demo=False) as server:
        started = time.monotonic()
        response = litellm.completion(messages=USER, **server.litellm_params("plain"))
        assert response.choices[0].message.content == "hello"
        assert time.monotonic() - started >= 0.3
        assert server.scenario_names == ["plain"]
