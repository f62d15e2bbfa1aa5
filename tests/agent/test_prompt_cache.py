"""Prompt caching: breakpoints where the provider needs them, cached tokens read from the usage the
provider reports, and litellm's cost at the cached-token price."""

from __future__ import annotations

from typing import Any

import pytest

from lestrade.operator.agent import model as model_mod
from lestrade.operator.agent.model import cached_prompt_tokens, wants_cache_breakpoints, with_cache_breakpoints

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a troubleshooter."},
    {"role": "user", "content": "Why does web-1 restart?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "kubectl_logs", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "a", "content": "OOMKilled"},
]


@pytest.mark.parametrize(
    ("model", "wanted"),
    [
        ("anthropic/claude-sonnet-4-5", True),
        ("bedrock/anthropic.claude-3-5-sonnet", True),
        ("vertex_ai/claude-3-5-sonnet", True),
        ("openai/gpt-4o", False),
        ("gemini/gemini-2.0-flash", False),
        ("openai/claude-imitation", False),
    ],
)
def test_breakpoints_only_for_providers_that_need_them(model: str, wanted: bool) -> None:
    assert wants_cache_breakpoints(model) is wanted


def test_breakpoints_on_the_system_prompt_and_the_last_message_without_changing_the_stored_ones() -> None:
    sent = with_cache_breakpoints(MESSAGES)
    ephemeral = {"type": "ephemeral"}
    assert sent[0]["content"] == [{"type": "text", "text": "You are a troubleshooter.", "cache_control": ephemeral}]
    assert sent[-1]["content"] == [{"type": "text", "text": "OOMKilled", "cache_control": ephemeral}]
    assert sent[1]["content"] == "Why does web-1 restart?" and sent[2] == MESSAGES[2]
    assert MESSAGES[0]["content"] == "You are a troubleshooter."  # the caller's list is untouched
    parts = with_cache_breakpoints(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}]
    )
    assert parts[0]["content"][1]["cache_control"] == ephemeral and "cache_control" not in parts[0]["content"][0]


def _response(cached: int | None) -> Any:
    model_mod._import()
    import litellm

    usage: dict[str, Any] = {"prompt_tokens": 100_000, "completion_tokens": 1_000, "total_tokens": 101_000}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return litellm.ModelResponse(
        model="gpt-4o",
        choices=[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "done"}}],
        usage=usage,
    )


def test_cached_tokens_are_read_and_priced_lower() -> None:
    plain, cached = model_mod._reply(_response(None)), model_mod._reply(_response(90_000))
    assert plain.usage["cached_tokens"] == 0 and cached.usage["cached_tokens"] == 90_000
    assert plain.cost > 0 and cached.cost < plain.cost * 0.7, (plain.cost, cached.cost)


def test_cached_tokens_from_any_usage_shape() -> None:
    class Usage:
        cache_read_input_tokens = 12

    assert cached_prompt_tokens(None) == 0
    assert cached_prompt_tokens(Usage()) == 12
    assert cached_prompt_tokens(type("U", (), {"prompt_tokens_details": {"cached_tokens": "7"}})()) == 7
    assert cached_prompt_tokens(type("U", (), {"prompt_tokens_details": {"cached_tokens": "lots"}})()) == 0
