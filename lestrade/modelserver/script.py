"""Turns (scenario, request) into the answer to send: which step plays, rendered.

Kept apart from HTTP so the choice of step — the heart of stateless replay — is a pure
function of the scenario and the request's messages.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from lestrade.modelserver.conversation import Conversation
from lestrade.modelserver.scenario import Fault, Scenario, Step
from lestrade.modelserver.templating import is_template, make_context, map_strings, render

__all__ = ["Reply", "ReplyToolCall", "ScriptError", "Selection", "render_reply", "select_step"]


class ScriptError(ValueError):
    """The scenario has no answer for this request (e.g. past the end with after_last=error)."""


@dataclass(frozen=True)
class Selection:
    step: Step
    index: int  # positional index; for a rule, the step index the request was at
    key: str  # "step:N" or "rule:N" — what fault counters are keyed by


@dataclass(frozen=True)
class ReplyToolCall:
    id: str
    name: str
    arguments: str  # exactly what goes on the wire


@dataclass(frozen=True)
class Reply:
    content: str | None
    reasoning: str | None
    tool_calls: list[ReplyToolCall] = field(default_factory=list)
    finish_reason: str = "stop"


def select_step(scenario: Scenario, conversation: Conversation) -> Selection:
    """The first matching rule, else the step at the conversation's position."""
    index = conversation.assistant_count_this_turn if scenario.step_counting == "turn" else conversation.assistant_count
    for number, rule in enumerate(scenario.rules):
        if _matches(rule.when.model_dump(), conversation):
            return Selection(rule.respond, index, f"rule:{number}")
    if not scenario.steps:
        raise ScriptError(f"scenario {scenario.name!r}: no rule matches and it has no steps")
    if index >= len(scenario.steps):
        if scenario.after_last == "error":
            raise ScriptError(
                f"scenario {scenario.name!r} has {len(scenario.steps)} step(s); "
                f"this request is at step {index} ({scenario.step_counting} step counting)"
            )
        index = len(scenario.steps) - 1
    return Selection(scenario.steps[index], index, f"step:{index}")


def _matches(condition: dict[str, str | None], conversation: Conversation) -> bool:
    texts = {
        "system_contains": lambda: conversation.system,
        "last_user_contains": lambda: conversation.last_user,
        "any_message_contains": lambda: conversation.all_text,
    }
    return all(
        re.search(pattern, texts[name]()) is not None for name, pattern in condition.items() if pattern is not None
    )


def render_reply(scenario: Scenario, selection: Selection, conversation: Conversation, fault: Fault | None) -> Reply:
    """Renders the step's templates; `fault` is the fault firing now (of the faults, only
    malformed tool JSON changes the reply itself: the arguments lose their last character)."""
    step = selection.step
    context: dict[str, Any] = {}
    if _uses_templates(step):
        context = make_context(conversation, step=selection.index, scenario=scenario.name, variables=scenario.vars)

    def text(value: str | None) -> str | None:
        return None if value is None else render(value, context)

    calls = []
    for position, call in enumerate(step.tool_calls):
        rendered = map_strings(call.arguments, lambda t: render(t, context))
        arguments = rendered if isinstance(rendered, str) else json.dumps(rendered)
        if fault is not None and fault.kind == "malformed_tool_json":
            arguments = arguments[:-1] if len(arguments) > 1 else "{"
        call_id = call.id or f"call_{conversation.key[:8]}_{conversation.assistant_count}_{position}"
        calls.append(ReplyToolCall(call_id, call.name, arguments))
    finish = step.finish_reason or ("tool_calls" if calls else "stop")
    return Reply(text(step.content), text(step.reasoning), calls, finish)


def _uses_templates(step: Step) -> bool:
    # Building the context renders every var; skip it for the common literal step.
    texts = [step.content or "", step.reasoning or ""]
    for call in step.tool_calls:
        map_strings(call.arguments, texts.append)
    return any(is_template(t) for t in texts)
