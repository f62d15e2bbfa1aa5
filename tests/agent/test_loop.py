"""The loop over the scripted model server: steps, parallel tool calls, max_steps, metadata."""

from __future__ import annotations

import json

from agent_support import FakeTool, Rendezvous, collect, final, of_kind, registry, transcript

from lestrade.operator.agent import BREAKDOWN_KEYS, DEFAULT_SECTIONS, PromptConfig, prompt_text


def _assert_max_tokens_everywhere(requests: list[dict], expected: int) -> None:
    assert requests
    assert all(r.get("max_tokens") == expected for r in requests), [r.get("max_tokens") for r in requests]


async def test_multi_step_tool_calling_reaches_an_answer(harness) -> None:
    harness.scenario(
        steps=[
            {"tool_calls": [{"name": "pods", "arguments": {"x": "shop"}}]},
            {"tool_calls": [{"name": "logs", "arguments": {"x": "{{ match('(web-\\\\d+)', tool='pods') }}"}}]},
            {"content": "Root cause: {{ tool_output('logs') }}"},
        ]
    )
    pods = FakeTool("pods", lambda p: "NAME   STATUS\nweb-7  CrashLoopBackOff")
    logs = FakeTool("logs", lambda p: f"{p['x']}: out of memory")
    agent = harness.agent(registry(pods, logs), max_output_tokens=777)
    start = agent.initial_messages("why does the shop crash?")
    events = await collect(agent.run(start))

    answer = final(events)
    assert answer.kind == "answer"
    assert answer.text == "Root cause: web-7: out of memory"
    assert answer.sections is None
    assert pods.calls == [{"x": "shop"}] and logs.calls == [{"x": "web-7"}]
    assert [m.step for m in of_kind(events, "model_message")] == [1, 2, 3]
    messages = transcript(events, start)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    requests = harness.requests()
    assert len(requests) == 3
    # the model saw the whole history (litellm leaves out null content)
    assert requests[-1]["messages"] == [{k: v for k, v in m.items() if v is not None} for m in messages[:-1]]
    _assert_max_tokens_everywhere(requests, 777)
    assert requests[0]["tools"][0]["function"]["name"] == "pods"


async def test_one_turns_tool_calls_run_concurrently(harness) -> None:
    harness.scenario(
        steps=[
            {"tool_calls": [{"name": "meet", "arguments": {"x": str(i)}} for i in range(3)]},
            {"content": "done"},
        ]
    )
    meet = FakeTool("meet", Rendezvous(3, timeout=5))  # serial execution would time out
    agent = harness.agent(registry(meet))
    events = await collect(agent.run(agent.initial_messages("go")))
    assert final(events).text == "done"
    results = of_kind(events, "tool_result")
    assert [r.output for r in results] == ["met 0", "met 1", "met 2"]
    assert all(r.status == "success" for r in results)
    kinds = [e.kind for e in events]
    # every call was announced before any result came back
    assert kinds.index("tool_result") > max(i for i, k in enumerate(kinds) if k == "tool_started")


async def test_the_last_step_forces_an_answer(harness) -> None:
    harness.scenario(
        steps=[{"tool_calls": [{"name": "echo", "arguments": {"x": "n{{ tool_outputs() | length }}"}}]}],
        rules=[
            {
                "when": {"last_user_contains": "used all the steps"},
                "respond": {"content": "best effort"},
            }
        ],
    )
    echo = FakeTool("echo")
    agent = harness.agent(registry(echo), max_steps=3)
    events = await collect(agent.run(agent.initial_messages("loop forever")))
    assert final(events).text == "best effort"
    assert len(echo.calls) == 2
    requests = harness.requests()
    assert len(requests) == 3
    assert "tool_choice" not in requests[0]
    assert requests[-1]["tool_choice"] == "none"
    assert requests[-1]["messages"][-1] == {"role": "user", "content": prompt_text.ANSWER_NOW}


async def test_a_forced_step_that_still_calls_tools_stores_no_dangling_calls(harness) -> None:
    harness.scenario(steps=[{"content": "partial", "tool_calls": [{"name": "echo", "arguments": {}}]}])
    echo = FakeTool("echo")
    agent = harness.agent(registry(echo), max_steps=1)
    start = agent.initial_messages("q")
    events = await collect(agent.run(start))
    assert final(events).text == "partial"
    assert echo.calls == []
    assert "tool_calls" not in transcript(events, start)[-1]


async def test_token_counts_report_usage_and_the_breakdown(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [{"name": "echo", "arguments": {"x": "a"}}]}, {"content": "fine"}])
    agent = harness.agent(registry(FakeTool("echo")), context_window=50_000, max_output_tokens=1_000)
    events = await collect(agent.run(agent.initial_messages("status?")))
    counts = of_kind(events, "token_count")
    assert len(counts) == 2
    for count in counts:
        assert set(count.breakdown) == set(BREAKDOWN_KEYS)
        parts = sum(v for k, v in count.breakdown.items() if k != "total_tokens")
        assert count.breakdown["total_tokens"] == parts
        assert count.prompt_tokens > 0 and count.total_tokens >= count.prompt_tokens
        assert (count.max_tokens, count.max_output_tokens) == (50_000, 1_000)
    first = counts[0].breakdown
    assert first["system_tokens"] > 100 and first["user_tokens"] > 0
    assert first["tools_tokens"] > 0 and first["tools_to_call_tokens"] > 0
    assert first["other_tokens"] > 0  # the tool result
    assert counts[1].breakdown["assistant_tokens"] > first["assistant_tokens"]


async def test_an_investigation_answer_is_parsed_into_sections(harness) -> None:
    body = {
        "Alert Explanation": "web-1 was OOMKilled",
        "Key Findings": "limit 64Mi",
        "Next Steps": None,
    }
    harness.scenario(steps=[{"content": "```json\n" + json.dumps(body) + "\n```"}])
    agent = harness.agent(registry(), PromptConfig(sections=DEFAULT_SECTIONS))
    events = await collect(agent.run(agent.initial_messages("investigate")))
    answer = final(events)
    assert answer.sections == {
        "Alert Explanation": "web-1 was OOMKilled",
        "Key Findings": "limit 64Mi",
    }
    assert answer.text.startswith("# Alert Explanation\n\nweb-1 was OOMKilled")


async def test_tool_started_is_seen_before_the_tool_runs(harness) -> None:
    harness.scenario(
        steps=[
            {"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]},
            {"content": "done"},
        ]
    )
    a, b = FakeTool("a"), FakeTool("b")
    agent = harness.agent(registry(a, b))
    seen_started = 0
    async for event in agent.run(agent.initial_messages("go")):
        if event.kind == "tool_started":
            seen_started += 1
            # a consumer persisting this event now has recorded the intent before execution
            assert a.calls == [] and b.calls == []
    assert seen_started == 2 and len(a.calls) == len(b.calls) == 1


async def test_a_forced_step_without_any_text_is_a_clear_error(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [{"name": "echo", "arguments": {}}]}])
    agent = harness.agent(registry(FakeTool("echo")), max_steps=2)
    events = await collect(agent.run(agent.initial_messages("q")))
    error = final(events)
    assert (error.kind, error.reason) == ("error", "MaxStepsReached")
    assert "2 steps" in error.message


async def test_repeated_tool_call_ids_are_made_unique(harness) -> None:
    harness.scenario(
        steps=[
            {
                "tool_calls": [
                    {"name": "echo", "arguments": {"x": "1"}, "id": "same"},
                    {"name": "echo", "arguments": {"x": "2"}, "id": "same"},
                ]
            },
            {"content": "{{ tool_outputs('echo') | join(',') }}"},
        ]
    )
    agent = harness.agent(registry(FakeTool("echo", lambda p: p["x"])))
    events = await collect(agent.run(agent.initial_messages("q")))
    assert final(events).text == "1,2"
    assert len({r.call_id for r in of_kind(events, "tool_result")}) == 2
