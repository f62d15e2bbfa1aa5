"""Templates in scripted answers, so an answer can contain facts only the cluster had.

A scripted step is written before the test runs, but what the tools return (pod names, exit
codes, log lines) is only known once the agent has run them; the model's answer must be able to
quote it, exactly as a real model would. Templates are Jinja in an *immutable sandbox* with
strict undefined names: a script can read the conversation through a few helper functions, but
cannot reach Python internals or change anything, and a typo fails loudly instead of rendering
an empty string.

Names available in a template:

- `last_user`, `first_user`, `system`: message texts; `step`: the step index; `scenario`: name
- `tool_output(name=None)`: the newest output of a call to that tool (any tool if None), or ""
- `tool_outputs(name=None)`: all those outputs, oldest first
- `tool_args(name=None)`: the arguments (dict) of the newest call to that tool, or {}
- `match(pattern, tool=None, text=None, group=None, default="")`: the first regex match in
  `text`, or else in the outputs of `tool` (newest output first). Returns the first capture
  group that took part in the match (the whole match when the pattern has no groups), or
  `group` when given; `default` when nothing matches. Patterns use re.MULTILINE.
- `rows(text, **where)`: the rows of a kubectl-like table in `text`, as dicts keyed by column
  header, keeping rows where every `COLUMN=regex` in `where` matches
- the scenario's `vars`

Jinja string literals treat backslashes as escapes (`'\\b'` is a backspace), so write regular
expressions in the scenario's `vars` (plain text, taken literally) or double the backslashes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from lestrade.modelserver.conversation import Conversation

__all__ = [
    "TemplateRenderError",
    "check_template",
    "is_template",
    "make_context",
    "map_strings",
    "render",
    "rows",
]


class TemplateRenderError(ValueError):
    """A template failed to compile or render; the message says which and why."""


_ENV = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def is_template(text: str) -> bool:
    return "{{" in text or "{%" in text or "{#" in text


@lru_cache(maxsize=512)
def _compile(text: str) -> Any:
    try:
        return _ENV.from_string(text)
    except TemplateError as exc:
        raise TemplateRenderError(f"template syntax error: {exc}") from exc


def check_template(text: str) -> None:
    """Raises TemplateRenderError when `text` is not a valid template."""
    if is_template(text):
        _compile(text)


def render(text: str, context: Mapping[str, Any]) -> str:
    """Renders `text` (returned as is when it contains no template syntax)."""
    if not is_template(text):
        return text
    try:
        return str(_compile(text).render(**context))
    except TemplateRenderError:
        raise
    except (TemplateError, re.error, TypeError, ValueError, LookupError, AttributeError) as exc:
        raise TemplateRenderError(f"cannot render template: {type(exc).__name__}: {exc}") from exc


def map_strings(value: Any, function: Callable[[str], Any]) -> Any:
    """`value` (nested dicts and lists) with `function` applied to every string in it."""
    if isinstance(value, str):
        return function(value)
    if isinstance(value, dict):
        return {k: map_strings(v, function) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, function) for v in value]
    return value


def make_context(
    conversation: Conversation, *, step: int, scenario: str, variables: Mapping[str, str]
) -> dict[str, Any]:
    """The names a template sees; `variables` are rendered in order, each seeing the previous."""

    def tool_outputs(name: str | None = None) -> list[str]:
        return [r.output for r in reversed(conversation.results_of(name))]

    def tool_output(name: str | None = None) -> str:
        results = conversation.results_of(name)
        return results[0].output if results else ""

    def tool_args(name: str | None = None) -> dict[str, Any]:
        results = conversation.results_of(name)
        return dict(results[0].arguments) if results else {}

    def match(
        pattern: str,
        tool: str | None = None,
        text: str | None = None,
        group: int | str | None = None,
        default: str = "",
    ) -> str:
        compiled = re.compile(pattern, re.MULTILINE)
        haystacks = [text] if text is not None else [r.output for r in conversation.results_of(tool)]
        for haystack in haystacks:
            found = compiled.search(haystack)
            if found:
                return _pick_group(found, group, default)
        return default

    context: dict[str, Any] = {
        "last_user": conversation.last_user,
        "first_user": conversation.first_user,
        "system": conversation.system,
        "step": step,
        "scenario": scenario,
        "tool_output": tool_output,
        "tool_outputs": tool_outputs,
        "tool_args": tool_args,
        "match": match,
        "rows": rows,
    }
    for name, template in variables.items():
        try:
            context[name] = render(template, context)
        except TemplateRenderError as exc:
            raise TemplateRenderError(f"var {name}: {exc}") from exc
    return context


def _pick_group(found: re.Match[str], group: int | str | None, default: str) -> str:
    if group is not None:
        value = found.group(group)
    else:
        value = next((g for g in found.groups() if g is not None), found.group(0))
    return default if value is None else value


_HEADER_CELL = re.compile(r"^[A-Z][A-Z0-9_()%/.\-]*(?: [A-Z][A-Z0-9_()%/.\-]*)*$")


def rows(text: str, **where: str) -> list[dict[str, str]]:
    """Parses the first kubectl-like table in `text` (an upper-case header line, then rows).

    Columns are sliced at the header's column positions, as kubectl aligns them, so cells with
    spaces ("5 (2m ago)") stay whole; a row that does not line up is split on whitespace.
    """
    lines = (text or "").splitlines()
    for index, line in enumerate(lines):
        cells = [c for c in re.split(r"\s{2,}|\t", line.strip()) if c]
        if len(cells) == 1:  # not aligned: single spaces between headers
            cells = cells[0].split()
        if len(cells) >= 2 and all(_HEADER_CELL.match(c) for c in cells):
            table = _parse_table(line, cells, lines[index + 1 :])
            filters = {column: re.compile(pattern) for column, pattern in where.items()}
            return [row for row in table if all(p.search(row.get(column, "")) for column, p in filters.items())]
    return []


def _parse_table(header: str, names: list[str], body: list[str]) -> list[dict[str, str]]:
    starts, cursor = [], 0
    for name in names:
        cursor = header.index(name, cursor)
        starts.append(cursor)
        cursor += len(name)
    table = []
    for line in body:
        if not line.strip():
            break
        aligned = "\t" not in line and all(
            start == 0 or (start <= len(line) and line[start - 1] == " ") for start in starts
        )
        if aligned:
            bounds = list(zip(starts, starts[1:] + [None]))
            cells = [line[a:b].strip() for a, b in bounds]
        else:
            cells = line.split(None, len(names) - 1)
        table.append(dict(zip(names, cells + [""] * (len(names) - len(cells)))))
    return table
