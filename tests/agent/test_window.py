"""The context window: oversized tool output is truncated and recorded; a long history is
compacted by a real summary call and the run goes on."""

from __future__ import annotations

from agent_support import FakeTool, collect, final, of_kind, registry, transcript

from lestrade.operator.agent import TRUNCATION_MARKER, count_text, prompt_text
from lestrade.operator.agent.window import truncate_tool_output

HUGE = "\n".join(f"line {i}: container web restarted with exit code 137" for i in range(4_000))


def test_truncation_cuts_on_the_budget_and_records_the_cut() -> None:
    text, cut = truncate_tool_output(HUGE, "c1", "logs", budget=300)
    assert text.endswith("\n" + TRUNCATION_MARKER)
    assert count_text(text) <= 300
    assert cut is not None
    assert (cut.tool_call_id, cut.tool_name, cut.start_index) == ("c1", "logs", 0)
    assert cut.end_index == len(text) - len("\n" + TRUNCATION_MARKER)
    assert HUGE[: cut.end_index] == text[: cut.end_index]
    assert cut.original_token_count == count_text(HUGE)
    assert truncate_tool_output("short", "c2", "logs", budget=300) == ("short", None)


async def test_oversized_tool_output_is_truncated_for_the_model(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [{"name": "logs", "arguments": {}}]}, {"content": "read it"}])
    agent = harness.agent(registry(FakeTool("logs", lambda p: HUGE)), context_window=8_000, max_output_tokens=1_000)
    events = await collect(agent.run(agent.initial_messages("logs?")))
    assert final(events).text == "read it"
    (result,) = of_kind(events, "tool_result")
    budget = int((8_000 - 1_000) * 0.25)
    assert result.truncated and result.output.endswith(TRUNCATION_MARKER)
    assert count_text(result.output) <= budget
    assert result.original_tokens == count_text(HUGE) == result.truncation.original_token_count
    sent = harness.requests()[1]["messages"][-1]
    assert sent["role"] == "tool" and sent["content"] == result.output
    assert of_kind(events, "token_count")[-1].truncations == [result.truncation]


async def test_a_long_history_is_compacted_by_a_summary_call(harness) -> None:
    block = " ".join(f"pod-{i} Running" for i in range(200))  # ~800 tokens per result
    harness.scenario(
        steps=[{"tool_calls": [{"name": "get", "arguments": {"x": "page {{ tool_outputs() | length }}"}}]}],
        rules=[
            {
                "when": {"system_contains": "conversation summarizer"},
                "respond": {"content": "<analysis>listed pages 0-3, all pods Running</analysis>"},
            },
            {
                "when": {"any_message_contains": "was compacted"},
                "respond": {"content": "all pods are fine"},
            },
        ],
    )
    get = FakeTool("get", lambda p: f"{p['x']}: {block}")
    agent = harness.agent(registry(get), context_window=4_000, max_output_tokens=500, keep_recent_turns=1)
    start = agent.initial_messages("are all pods fine?")
    events = await collect(agent.run(start))
    assert final(events).text == "all pods are fine"

    (started,) = of_kind(events, "compaction_started")
    (done,) = of_kind(events, "compaction")
    threshold = 0.85 * (4_000 - 500)
    assert started.initial_tokens > threshold
    assert (started.max_context_size, started.threshold_pct) == (4_000, 85)
    assert done.tokens_before == started.initial_tokens
    assert done.tokens_after < done.tokens_before
    assert done.messages_after < done.messages_before
    assert done.summary == "<analysis>listed pages 0-3, all pods Running</analysis>"
    assert done.compression_ratio_pct > 0
    assert done.compaction_cost["total_tokens"] > 0

    requests = harness.requests()
    summary_calls = [r for r in requests if "conversation summarizer" in r["messages"][0]["content"]]
    assert len(summary_calls) == 1
    assert "tools" not in summary_calls[0] and summary_calls[0]["max_tokens"] <= 500
    assert "page 0" in summary_calls[0]["messages"][1]["content"]  # the old turns were summarized
    after = requests[-1]["messages"]
    assert after[0]["role"] == "system" and after[1]["content"] == start[1]["content"]
    assert after[2]["content"].startswith(prompt_text.SUMMARY_HEADER)
    assert done.summary in after[2]["content"]
    assert after[3]["role"] == "assistant"  # the last turn kept verbatim, with its result
    assert after[4]["role"] == "tool" and after[4]["content"].startswith("page ")
    messages = transcript(events, start)
    assert [{k: v for k, v in m.items() if v is not None} for m in messages[:-1]] == after
