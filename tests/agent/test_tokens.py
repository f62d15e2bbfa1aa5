"""Token counting by role and the context window, offline."""

from __future__ import annotations

import json

from lestrade.operator.agent import Limits, context_limits, count_text, token_breakdown


def test_breakdown_follows_the_reference_roles() -> None:
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    calls = [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{}"}}]
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list pods please"},
        {"role": "assistant", "content": "checking", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "web-1 Running"},
        {"role": "assistant", "content": "all good"},
    ]
    out = token_breakdown(messages, tools)
    assert out["tools_tokens"] == count_text(json.dumps(tools, separators=(",", ":")))
    assert out["tools_to_call_tokens"] == count_text(json.dumps(calls, separators=(",", ":")))
    assert out["system_tokens"] == count_text("be brief") + 3
    assert out["user_tokens"] == count_text("list pods please") + 3
    assert out["assistant_tokens"] == count_text("checking") + count_text("all good") + 6
    assert out["other_tokens"] == count_text("web-1 Running") + 3  # tool results
    assert out["total_tokens"] == sum(v for k, v in out.items() if k != "total_tokens")


def test_context_window_comes_from_litellm_or_the_override() -> None:
    known = context_limits({"model": "gpt-4o"}, Limits())
    assert (known.window, known.max_output) == (128_000, 16_384)
    capped = context_limits({"model": "anthropic/claude-sonnet-4-5-20250929"}, Limits())
    assert capped.window == 200_000 and capped.max_output == 16_384
    unknown = context_limits({"model": "openai/some-local-model"}, Limits())
    assert (unknown.window, unknown.max_output) == (128_000, 4_096)
    small = context_limits({"model": "gpt-4o"}, Limits(context_window=4_000))
    assert (small.window, small.max_output) == (4_000, 1_000)
    explicit = context_limits({"model": "gpt-4o", "max_tokens": 2_000}, Limits())
    assert explicit.max_output == 2_000
    assert context_limits({"model": "x"}, Limits(max_output_tokens=300)).max_output == 300
    assert small.input_budget == 3_000


def test_a_window_counted_before_is_counted_on_the_loop_and_a_large_new_text_is_not() -> None:
    """The loop counts a history twice per model call: what was counted before comes from the
    cache on the loop's own thread; a large text never counted (a tool's output) is refused
    there (None: the caller counts in a thread), with the same figures either way."""
    from lestrade.context.tokens import token_breakdown_if_cheap

    tools = ({"type": "function", "function": {"name": "kubectl_get", "description": "get", "parameters": {}}},)
    history = [
        {"role": "system", "content": "you are a detective, unique text 7f3a"},
        {"role": "user", "content": "why is web down? 7f3a"},
    ]
    output = {"role": "tool", "tool_call_id": "c1", "content": "log line 7f3a\n" * 2000}  # ~28 KB
    assert token_breakdown_if_cheap(history, tools, new_chars=8192) == token_breakdown(history, tools)
    assert token_breakdown_if_cheap([*history, output], tools, new_chars=8192) is None
    full = token_breakdown([*history, output], tools)
    assert token_breakdown_if_cheap([*history, output], tools, new_chars=8192) == full
    assert full["other_tokens"] > 2000
