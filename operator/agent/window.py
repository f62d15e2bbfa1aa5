"""Keeps the conversation inside the model's context window.

Two mechanisms. A single tool result larger than its share of the window is cut on a token
boundary and ends with `[TRUNCATED]`, and the cut is recorded with reference 000's truncation
fields. When the whole history passes `compaction_ratio` of the input window, the older part
is replaced by a summary the model writes in a separate call (its own system prompt, which is
how the scripted model server recognizes it); the system prompt, the user's latest ask and the
last turns stay verbatim, so the model keeps its instructions and its immediate working state.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lestrade.context.window import compact_without_model, is_note, latest_ask_index
from lestrade.operator.agent import prompt_text as text
from lestrade.operator.agent.events import ModelRetry, Truncation
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.model import ModelReply, complete
from lestrade.operator.agent.tokens import count_text, truncate_to_tokens

__all__ = [
    "TRUNCATION_MARKER",
    "truncate_tool_output",
    "is_note",
    "latest_ask_index",
    "Compacted",
    "compact",
    "compact_without_model",
]

TRUNCATION_MARKER = "[TRUNCATED]"
_SUMMARY_MAX_TOKENS = 4_096


def truncate_tool_output(
    output: str, call_id: str, tool_name: str, budget: int, model: str = ""
) -> tuple[str, Truncation | None]:
    """`output` cut to `budget` tokens (marker included), and the record of the cut."""
    original = count_text(output, model)
    if original <= budget:
        return output, None
    marker = "\n" + TRUNCATION_MARKER
    kept = truncate_to_tokens(output, max(budget - count_text(marker, model), 0), model)
    record = Truncation(
        tool_call_id=call_id,
        tool_name=tool_name,
        start_index=0,
        end_index=len(kept),
        original_token_count=original,
    )
    return kept + marker, record


def _render(message: Mapping[str, Any]) -> str:
    role = message.get("role", "other")
    content = message.get("content")
    body = content if isinstance(content, str) else json.dumps(content, default=str)
    lines = [f"[{role}] {body}" if body else f"[{role}]"]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        lines.append(f"[assistant called {fn.get('name')}({fn.get('arguments')})]")
    return "\n".join(lines)


@dataclass(frozen=True)
class Compacted:
    """The result of a compaction: the new working history and the summary call's cost."""

    messages: list[dict[str, Any]]
    summary: str
    reply: ModelReply


def _split(
    messages: Sequence[dict[str, Any]], keep_turns: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(before, middle, after): `middle` is summarized; None if there is nothing to compact."""
    head = 0
    while head < len(messages) and messages[head].get("role") in ("system", "developer"):
        head += 1
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i >= head]
    tail = turns[-keep_turns] if keep_turns and len(turns) >= keep_turns else len(messages)
    ask = latest_ask_index(messages)
    middle_idx = [i for i in range(head, tail) if i != ask]
    if not middle_idx:
        return None
    middle = [messages[i] for i in middle_idx]
    before = list(messages[:head])
    after = list(messages[tail:])
    if ask is not None and ask < tail:
        # The ask stays verbatim, before the summary if it came before what is summarized.
        if ask < middle_idx[0]:
            before.append(messages[ask])
        else:
            after.insert(0, messages[ask])
    return before, middle, after


async def compact(
    settings: Mapping[str, Any],
    messages: Sequence[dict[str, Any]],
    *,
    limits: Limits,
    input_budget: int,
    max_output: int,
    deadline: float | None,
) -> AsyncIterator[ModelRetry | Compacted]:
    """Yields retries of the summary call, then `Compacted` (nothing when nothing to compact)."""
    parts = _split(messages, limits.keep_recent_turns)
    if parts is None:
        return
    before, middle, after = parts
    model = str(settings.get("model", ""))
    summary_tokens = min(max_output, _SUMMARY_MAX_TOKENS)
    room = max(input_budget - summary_tokens - 500, 200)
    conversation = truncate_to_tokens("\n\n".join(_render(m) for m in middle), room, model)
    request = [
        {"role": "system", "content": text.SUMMARY_SYSTEM},
        {"role": "user", "content": text.SUMMARY_REQUEST.format(conversation=conversation)},
    ]
    reply: ModelReply | None = None
    async for item in complete(settings, request, max_tokens=summary_tokens, limits=limits, deadline=deadline):
        if isinstance(item, ModelRetry):
            yield item
        else:
            reply = item
    assert reply is not None
    summary = reply.content.strip()
    note = {"role": "user", "content": text.SUMMARY_HEADER + summary}
    yield Compacted(messages=[*before, note, *after], summary=summary, reply=reply)
