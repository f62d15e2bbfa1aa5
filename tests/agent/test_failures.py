"""Failures: tool and run timeouts, 429/5xx retries, a hung model, malformed tool JSON."""

from __future__ import annotations

import asyncio
import time

from agent_support import FakeTool, collect, final, of_kind, registry

from lestrade.operator.agent import prompt_text


def _never(params: dict) -> object:
    return asyncio.Event().wait()  # a tool that never finishes


async def test_a_tool_over_its_timeout_becomes_an_error_result(harness) -> None:
    harness.scenario(
        steps=[
            {
                "tool_calls": [
                    {"name": "stuck", "arguments": {}},
                    {"name": "quick", "arguments": {}},
                ]
            },
            {"content": "saw: {{ tool_output('stuck') }}"},
        ]
    )
    agent = harness.agent(registry(FakeTool("stuck", _never), FakeTool("quick")), tool_timeout=0.2)
    events = await collect(agent.run(agent.initial_messages("go")))
    stuck, quick = of_kind(events, "tool_result")
    assert stuck.status == "error" and "did not finish within 0.2 s" in stuck.output
    assert quick.status == "success"
    assert final(events).text == f"saw: {stuck.output}"


async def test_the_overall_timeout_stops_the_run(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [{"name": "stuck", "arguments": {}}]}, {"content": "never"}])
    agent = harness.agent(registry(FakeTool("stuck", _never)), timeout=0.5, tool_timeout=30)
    began = time.monotonic()
    events = await collect(agent.run(agent.initial_messages("go")))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "Timeout")
    assert time.monotonic() - began < 5


async def test_429_is_retried_after_the_servers_retry_after(harness) -> None:
    harness.scenario(steps=[{"content": "ok", "fault": {"kind": "rate_limit", "retry_after": 1, "times": 1}}])
    # Our own backoff would wait 10 s: finishing well before proves Retry-After was used.
    agent = harness.agent(registry(), backoff_base=10, backoff_max=30)
    began = time.monotonic()
    events = await collect(agent.run(agent.initial_messages("hi")))
    elapsed = time.monotonic() - began
    assert final(events).text == "ok"
    (retry,) = of_kind(events, "model_retry")
    assert (retry.reason, retry.delay, retry.attempt) == ("RateLimited", 1.0, 1)
    assert 0.9 <= elapsed < 5
    assert len(harness.requests()) == 2


async def test_5xx_is_retried_with_backoff_then_succeeds(harness) -> None:
    harness.scenario(steps=[{"content": "ok", "fault": {"kind": "server_error", "times": 2}}])
    agent = harness.agent(registry(), backoff_base=0.01, max_retries=3)
    events = await collect(agent.run(agent.initial_messages("hi")))
    assert final(events).text == "ok"
    retries = of_kind(events, "model_retry")
    assert [(r.reason, r.delay) for r in retries] == [("ServerError", 0.01), ("ServerError", 0.02)]
    assert len(harness.requests()) == 3


async def test_5xx_retries_are_bounded(harness) -> None:
    harness.scenario(steps=[{"content": "ok", "fault": {"kind": "server_error"}}])
    agent = harness.agent(registry(), backoff_base=0.01, max_retries=2)
    events = await collect(agent.run(agent.initial_messages("hi")))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "ServerError")
    assert "after 3 attempts" in error.message
    assert len(harness.requests()) == 3  # litellm and the OpenAI client did not retry on their own


async def test_a_hung_model_times_out(harness) -> None:
    harness.scenario(steps=[{"content": "ok", "fault": {"kind": "hang"}}])
    agent = harness.agent(registry(), model_timeout=0.3, max_retries=1, backoff_base=0.01)
    began = time.monotonic()
    events = await collect(agent.run(agent.initial_messages("hi")))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "ModelTimeout")
    assert [r.reason for r in of_kind(events, "model_retry")] == ["ModelTimeout"]
    assert 0.6 <= time.monotonic() - began < 5
    assert len(harness.requests()) == 2


async def test_errors_retrying_cannot_fix_fail_at_once(harness) -> None:
    # no scenario with this name: the server answers 404
    agent = harness.agent(registry(), settings={"model": "openai/no-such-scenario-xyz"})
    events = await collect(agent.run(agent.initial_messages("hi")))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "ModelError"), error
    assert of_kind(events, "model_retry") == []


async def test_malformed_tool_json_once_is_retried_with_an_explanation(harness) -> None:
    harness.scenario(
        steps=[
            {
                "tool_calls": [{"name": "echo", "arguments": {"x": "a"}}],
                "fault": {"kind": "malformed_tool_json", "times": 1},
            },
            {"content": "done"},
        ]
    )
    echo = FakeTool("echo")
    agent = harness.agent(registry(echo))
    events = await collect(agent.run(agent.initial_messages("go")))
    assert final(events).text == "done"
    assert echo.calls == [{"x": "a"}]
    assert [r.reason for r in of_kind(events, "model_retry")] == ["MalformedToolCall"]
    first, retry, _ = harness.requests()
    assert retry["messages"][:-1] == first["messages"]
    note = retry["messages"][-1]
    assert note["role"] == "user" and "not valid JSON" in note["content"]
    assert note["content"].startswith(prompt_text.NOTE_PREFIX)


async def test_malformed_tool_json_twice_fails_clearly(harness) -> None:
    harness.scenario(
        steps=[
            {
                "tool_calls": [{"name": "echo", "arguments": '{"x": "a"'}],
            }
        ]
    )
    echo = FakeTool("echo")
    agent = harness.agent(registry(echo))
    events = await collect(agent.run(agent.initial_messages("go")))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "MalformedToolCall")
    assert "echo" in error.message and "not valid JSON" in error.message
    assert echo.calls == []
    assert len(harness.requests()) == 2
