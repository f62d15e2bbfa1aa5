"""Scenarios: what the scripted model answers, as plain data.

A scenario is chosen by the request's `model` field and is replayed *statelessly*: the step to
play is derived from the request's own messages (how many assistant messages it already holds),
so any number of concurrent conversations, retries and restarted clients all see the same script
without the server remembering anything per conversation. Rules are checked before positional
steps so that prompts that can arrive at any point (a compaction/summary request, a special
question) get their own answer.

Scenarios load from dicts, YAML or JSON so tests and the demo model share one format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lestrade.modelserver.templating import check_template, map_strings

__all__ = [
    "Fault",
    "FaultKind",
    "Rule",
    "RuleCondition",
    "Scenario",
    "Step",
    "ToolCall",
    "Usage",
    "load_scenarios",
]

FaultKind = Literal["rate_limit", "server_error", "hang", "malformed_tool_json"]


class _Strict(BaseModel):
    # Unknown keys are almost always typos in a hand-written script; fail loudly.
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Strict):
    """One function call the model asks for.

    `arguments` is a dict (sent as JSON) or a raw string sent verbatim, which lets a test send
    malformed JSON on purpose. String values (or the raw string) are templates. Without `id`, a
    deterministic id is derived from the conversation, step and position.
    """

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None


class Fault(_Strict):
    """A failure the step produces instead of (or, for malformed JSON, inside) its answer.

    With `times`, the fault fires for the first N requests that reach this step of one
    conversation (keyed by scenario, step and the first user message), then the step answers
    normally; without it, it fires every time.
    """

    kind: FaultKind
    times: int | None = Field(default=None, ge=1)
    retry_after: int = Field(default=1, ge=0, description="Retry-After seconds (rate_limit)")


class Usage(_Strict):
    """Overrides of the token counts the server would compute; unset fields stay computed."""

    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(
        default=None,
        ge=0,
        description="reported as usage.prompt_tokens_details.cached_tokens, as OpenAI "
        "(and litellm for Anthropic's cache reads) report a prompt-cache hit",
    )


class Step(_Strict):
    """One model answer. A bare string in a scenario file is shorthand for `{content: ...}`."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    latency_ms: int | None = Field(default=None, ge=0)
    stream_chunk_ms: int = Field(default=0, ge=0)
    usage: Usage | None = None
    fault: Fault | None = None
    finish_reason: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"content": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fault_fits(self) -> Step:
        if self.fault and self.fault.kind == "malformed_tool_json" and not self.tool_calls:
            raise ValueError("a malformed_tool_json fault needs tool_calls to corrupt")
        return self


class RuleCondition(_Strict):
    """Regular expressions (Python `re.search`); every one that is set must match."""

    system_contains: str | None = None
    last_user_contains: str | None = None
    any_message_contains: str | None = None

    @model_validator(mode="after")
    def _valid(self) -> RuleCondition:
        patterns = [p for p in self.model_dump().values() if p is not None]
        if not patterns:
            raise ValueError("a rule needs at least one condition")
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regular expression {pattern!r}: {exc}") from exc
        return self


class Rule(_Strict):
    """Answer `respond` whenever `when` matches, whatever the position in the conversation."""

    when: RuleCondition
    respond: Step


class Scenario(_Strict):
    """A named script: rules first, then positional steps.

    The step index is the number of assistant messages already in the request
    (`step_counting: conversation`), or only those after the last user message
    (`step_counting: turn`, so every new question replays the script from its start).
    Past the last step the last step repeats (`after_last: repeat`, the default) or the request
    fails with HTTP 400 (`after_last: error`).

    `vars` are templates rendered in order before the step (each sees the ones before it) and
    usable by name in every template of the scenario; plain text is not escaped there, which
    makes them the place for regular expressions.
    """

    name: str = Field(min_length=1)
    description: str = ""
    steps: list[Step] = Field(default_factory=list)
    rules: list[Rule] = Field(default_factory=list)
    vars: dict[str, str] = Field(default_factory=dict)
    step_counting: Literal["conversation", "turn"] = "conversation"
    after_last: Literal["repeat", "error"] = "repeat"
    latency_ms: int | None = Field(default=None, ge=0)
    ignores_response_format: bool = False
    """Plays a provider without structured output: `response_format` is accepted and ignored."""

    @field_validator("name")
    @classmethod
    def _no_spaces(cls, value: str) -> str:
        if any(ch.isspace() for ch in value):
            raise ValueError("scenario names are model names and cannot contain whitespace")
        return value

    @model_validator(mode="after")
    def _playable(self) -> Scenario:
        if not self.steps and not self.rules:
            raise ValueError(f"scenario {self.name!r} has neither steps nor rules")
        for where, text in self._templates():
            try:
                check_template(text)
            except ValueError as exc:
                raise ValueError(f"scenario {self.name!r} {where}: {exc}") from exc
        return self

    def _templates(self) -> Iterable[tuple[str, str]]:
        for key, text in self.vars.items():
            yield f"var {key}", text
        labelled = [(f"step {i}", s) for i, s in enumerate(self.steps)]
        labelled += [(f"rule {i}", r.respond) for i, r in enumerate(self.rules)]
        for label, step in labelled:
            for field in ("content", "reasoning"):
                if getattr(step, field):
                    yield f"{label} {field}", getattr(step, field)
            for call in step.tool_calls:
                texts: list[str] = []
                map_strings(call.arguments, texts.append)
                for text in texts:
                    yield f"{label} tool call {call.name}", text

    @classmethod
    def parse(cls, data: Scenario | dict[str, Any]) -> Scenario:
        return data if isinstance(data, Scenario) else cls.model_validate(data)


def load_scenarios(path: str | Path) -> list[Scenario]:
    """Scenarios from a YAML or JSON file: one scenario, a list, or `{scenarios: [...]}`."""
    path = Path(path)
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from exc
    if isinstance(data, dict) and "scenarios" in data and "name" not in data:
        data = data["scenarios"]
    items = data if isinstance(data, list) else [data]
    try:
        return [Scenario.model_validate(item) for item in items]
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
