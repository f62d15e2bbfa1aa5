"""Builds the system and user prompts from named sections that can each be switched off.

The section keys and their precedence are reference 000's ("Fast Mode & Prompt Controls"):
the `ENABLED_PROMPTS` environment variable (a comma-separated list of keys, or `none`) decides
which sections are *allowed*; `behavior_controls` (per request) switches sections on or off
within what is allowed; otherwise the default applies (every section on except `ai_safety`,
which the reference lists as disabled by default). A request can never re-enable a section the
environment disallows. Sections that have nothing to say (no cluster name, no files, no TodoWrite
tool offered, no one to ask in an investigation) are left out even when enabled: every
section is resent with every model call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml

from lestrade.operator.agent import prompt_text as text
from lestrade.operator.agent.tokens import count_text, tools_tokens
from lestrade.operator.tools.base import ToolRegistry

__all__ = [
    "SYSTEM_SECTIONS",
    "USER_SECTIONS",
    "SECTION_KEYS",
    "DEFAULT_SECTIONS",
    "PromptConfig",
    "InvestigationRequest",
    "enabled_sections",
    "system_prompt",
    "user_prompt",
    "first_call_tokens",
]

SYSTEM_SECTIONS: tuple[str, ...] = (
    "intro",
    "ask_user",
    "todowrite_instructions",
    "ai_safety",
    "toolset_instructions",
    "permission_errors",
    "general_instructions",
    "style_guide",
    "cluster_name",
    "system_prompt_additions",
)
USER_SECTIONS: tuple[str, ...] = ("files", "todowrite_reminder", "time_runbooks")
SECTION_KEYS: tuple[str, ...] = SYSTEM_SECTIONS + USER_SECTIONS

_OFF_BY_DEFAULT = frozenset({"ai_safety"})

# The hints are resent with every model call of an investigation: a few words each.
DEFAULT_SECTIONS: dict[str, str] = {
    "Alert Explanation": 'What happened ("pod X was OOMKilled"), in 1-2 sentences.',
    "Key Findings": "What each check showed.",
    "Conclusions and Possible Root Causes": "The root causes the evidence supports; what is uncertain.",
    "Next Steps": "How to fix or dig further, exact commands.",
    "App or Infra?": "Which, and why.",
    "External links": "Relevant documentation.",
}


@dataclass(frozen=True)
class PromptConfig:
    """What goes into the prompts of one run.

    `sections` (title -> what to write) asks for a structured final answer; investigations pass
    `spec.sections or DEFAULT_SECTIONS`, chats leave it `None`. The run parses the answer into
    `Answer.sections` exactly when `sections` is set, so a resumed run must be given the same
    config (it is derived from the immutable spec).
    """

    behavior_controls: Mapping[str, bool] | None = None
    enabled_prompts: str | None = None
    """The `ENABLED_PROMPTS` value; `None` reads the environment when the prompt is built."""
    cluster_name: str | None = None
    system_prompt_additions: str | None = None
    """Configured additions plus the request's `additional_system_prompt`."""
    files: Sequence[tuple[str, str]] = ()
    """Attached files as (name, content)."""
    runbooks: Sequence[str] = ()
    custom_instructions: str | None = None
    sections: Mapping[str, str] | None = None
    now: datetime | None = None
    """Fixed current time (tests); default: the time the user prompt is built."""


@dataclass(frozen=True)
class InvestigationRequest:
    """An issue to investigate, the fields of `/api/investigate` and an Investigation's spec."""

    title: str
    description: str = ""
    source: str = "kubernetes"
    subject: Mapping[str, Any] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)
    question: str | None = None


def enabled_sections(
    behavior_controls: Mapping[str, bool] | None = None,
    enabled_prompts: str | None = None,
) -> frozenset[str]:
    """The section keys in force: env allow-list, then behavior_controls, then defaults."""
    raw = enabled_prompts  # ENABLED_PROMPTS, read by the operator's settings
    allowed: frozenset[str] = frozenset(SECTION_KEYS)
    if raw is not None and raw.strip():
        items = {item.strip().lower() for item in raw.split(",") if item.strip()}
        allowed = frozenset() if items == {"none"} else frozenset(items) & allowed
    controls = behavior_controls or {}
    return frozenset(
        key for key in SECTION_KEYS if key in allowed and bool(controls.get(key, key not in _OFF_BY_DEFAULT))
    )


def _has_todo_tool(registry: ToolRegistry) -> bool:
    """TodoWrite is offered from the start (when its toolset is deferred, opening it answers
    with how to use it instead)."""
    return any("todo" in tool.name.lower() for tool in registry.offered_tools())


def system_prompt(registry: ToolRegistry, config: PromptConfig) -> str:
    """The system message text: enabled, non-empty sections in the reference's order."""
    on = enabled_sections(config.behavior_controls, config.enabled_prompts)
    todo = _has_todo_tool(registry)
    parts: dict[str, str] = {
        "intro": text.INTRO,
        # An investigation (it asks for sections) has no one to answer a question.
        "ask_user": "" if config.sections else text.ASK_USER,
        "todowrite_instructions": text.TODOWRITE_INSTRUCTIONS if todo else "",
        "ai_safety": text.AI_SAFETY,
        "toolset_instructions": registry.instructions(),
        "permission_errors": text.PERMISSION_ERRORS,
        "general_instructions": text.GENERAL_INSTRUCTIONS,
        "style_guide": text.STYLE_GUIDE,
        "cluster_name": (text.CLUSTER_NAME.format(cluster_name=config.cluster_name) if config.cluster_name else ""),
        "system_prompt_additions": config.system_prompt_additions or "",
    }
    return "\n\n".join(parts[key].strip() for key in SYSTEM_SECTIONS if key in on and parts[key])


def _dump(value: Mapping[str, Any]) -> str:
    return yaml.safe_dump(json.loads(json.dumps(value, default=str)), sort_keys=False).strip()


def _investigation_text(request: InvestigationRequest) -> str:
    lines = [f"Investigate this {request.source} issue: {request.title}"]
    if request.description:
        lines.append(f"Description: {request.description}")
    if request.subject:
        lines.append(f"Subject:\n{_dump(request.subject)}")
    if request.context:
        lines.append(f"Context:\n{_dump(request.context)}")
    if request.question:
        lines.append(f"Question: {request.question}")
    return "\n\n".join(lines)


def user_prompt(ask: str | InvestigationRequest, registry: ToolRegistry, config: PromptConfig) -> str:
    """The user message text: the ask, the requested sections, then enabled user sections."""
    on = enabled_sections(config.behavior_controls, config.enabled_prompts)
    parts = [ask if isinstance(ask, str) else _investigation_text(ask)]
    if config.sections:
        listing = "\n".join(f"- {title}: {hint}" for title, hint in config.sections.items())
        parts.append(text.SECTIONS_REQUEST.format(sections=listing))
    if "files" in on and config.files:
        parts.extend(f'<file name="{name}">\n{body}\n</file>' for name, body in config.files)
    if "todowrite_reminder" in on and _has_todo_tool(registry):
        parts.append(text.TODOWRITE_REMINDER)
    if "time_runbooks" in on:
        now = config.now or datetime.now(UTC)
        parts.append(f"Current time: {now.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        if config.runbooks:
            parts.append("Runbooks that may apply:\n" + "\n\n".join(config.runbooks))
        if config.custom_instructions:
            parts.append(f"Instructions from the operator:\n{config.custom_instructions}")
    return "\n\n".join(p for p in parts if p)


def first_call_tokens(registry: ToolRegistry, config: PromptConfig | None = None, model: str = "") -> int:
    """Tokens of what every run sends first: the system message and the tool definitions."""
    system = system_prompt(registry, config or PromptConfig())
    return count_text(system, model) + 3 + tools_tokens(registry.schemas(), model)
