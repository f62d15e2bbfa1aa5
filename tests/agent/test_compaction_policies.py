"""The context-store compaction policies without a model call: last_n, skip_parts, manual."""

from __future__ import annotations

from typing import Any

from lestrade.operator.agent.window import compact_without_model


def history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "rules"}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"ask {i}"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": f"thinking {i}",
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    return messages


def test_last_n_keeps_the_system_prompt_and_the_newest_messages_without_orphans() -> None:
    messages = history(5)
    kept = compact_without_model(messages, "last_n", 3)
    assert kept is not None
    assert kept[0] == {"role": "system", "content": "rules"}
    # The newest 3 are [assistant with call c4, tool c4, answer 4], and the latest ask stays.
    assert [m.get("content") for m in kept[1:]] == ["ask 4", None, "output 4", "answer 4"]
    # Cut in the middle of a call and its result: the orphaned result is dropped.
    kept = compact_without_model(messages, "last_n", 2)
    assert [m["role"] for m in kept] == ["system", "user", "assistant"]


def test_skip_parts_slims_older_messages_and_keeps_the_newest_whole() -> None:
    messages = history(3)
    slim = compact_without_model(messages, "skip_parts", 4, ["tool_result", "reasoning"])
    assert slim is not None and len(slim) == len(messages)
    old_tools = [m["content"] for m in slim[:-4] if m["role"] == "tool"]
    assert old_tools and all("omitted by compaction" in c for c in old_tools)
    assert all("reasoning_content" not in m for m in slim[:-4])
    assert slim[-4:] == messages[-4:]
    no_calls = compact_without_model(messages, "skip_parts", 4, ["tool_call"])
    assert no_calls is not None
    assert not any(m.get("tool_calls") for m in no_calls[:-4])
    assert not any(m["role"] == "tool" for m in no_calls[:-4])  # results of dropped calls go too
    assert [m["content"] for m in no_calls if m["role"] == "user"] == ["ask 0", "ask 1", "ask 2"]


def test_manual_and_short_histories_are_left_alone() -> None:
    messages = history(2)
    assert compact_without_model(messages, "manual", 3) is None
    assert compact_without_model(messages, "last_n", 100) is None
    assert compact_without_model(messages, "skip_parts", 100, ["tool_result"]) is None
