"""Turns a final answer into the requested sections, whatever shape the model chose.

We ask for one JSON object in a code fence, but models also answer with bare JSON, JSON wrapped
in prose, `{"sections": {...}}`, or plain markdown headings; and they drop, rename the case of,
or add sections. The parser accepts all of these, maps keys to the requested titles case- and
punctuation-insensitively, keeps extra sections under their own titles, and returns `None`
when the text has no structure at all (the caller then keeps the raw text as the analysis).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

__all__ = ["parse_sections", "render_sections", "format_answer"]

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)\n?```", re.DOTALL)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_BOLD_HEADING = re.compile(r"^\s{0,3}\*\*(.+?)\*\*:?\s*$")


def _key(title: str) -> str:
    """Normalized title: lower case, no numbering, no punctuation, single spaces."""
    title = re.sub(r"^\s*\d+[.)]\s*", "", title)
    return " ".join(re.sub(r"[^\w\s]", " ", title.lower()).split())


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return "\n".join(f"- {_as_text(item) or ''}" for item in value).strip()
    return yaml.safe_dump(value, sort_keys=False).strip()


def _json_object(text: str) -> dict[str, Any] | None:
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    stripped = text.strip()
    candidates.append(stripped)
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        candidates.append(stripped[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate, strict=False)
        except ValueError:
            continue
        if isinstance(value, dict):
            inner = value.get("sections")
            return inner if len(value) == 1 and isinstance(inner, dict) else value
    return None


def _markdown_sections(text: str) -> dict[str, str] | None:
    lines = text.splitlines()
    heads: list[tuple[int, str, int]] = []  # (line index, title, level)
    for i, line in enumerate(lines):
        if m := _HEADING.match(line):
            heads.append((i, m.group(2).strip().rstrip(":"), len(m.group(1))))
        elif m := _BOLD_HEADING.match(line):
            heads.append((i, m.group(1).strip().rstrip(":"), 7))
    if not heads:
        return None
    level = min(h[2] for h in heads)  # split on the top level only; deeper headings are content
    tops = [h for h in heads if h[2] == level]
    result: dict[str, str] = {}
    for n, (i, title, _) in enumerate(tops):
        stop = tops[n + 1][0] if n + 1 < len(tops) else len(lines)
        result[title] = "\n".join(lines[i + 1 : stop]).strip()
    return result


def _parse(text: str, titles: Sequence[str]) -> tuple[dict[str, str] | None, bool]:
    """(sections, whether they came from JSON)."""
    canonical = {_key(t): t for t in titles}
    raw: Mapping[str, Any] | None = _json_object(text)
    from_json = raw is not None
    if raw is None or (canonical and not any(_key(str(k)) in canonical for k in raw)):
        # A JSON object that names none of the sections is probably an example in the prose.
        markdown = _markdown_sections(text)
        if markdown:
            raw, from_json = markdown, False
    if not raw:
        return None, False
    result: dict[str, str] = {}
    for name, value in raw.items():
        body = _as_text(value)
        if body:
            result[canonical.get(_key(str(name)), str(name))] = body
    return result or None, from_json


def parse_sections(text: str, titles: Sequence[str]) -> dict[str, str] | None:
    """Sections found in `text`, keyed by the requested title where one matches.

    Missing sections are absent, empty ones are dropped, extra ones keep their own title.
    """
    return _parse(text, titles)[0]


def render_sections(sections: Mapping[str, str], titles: Sequence[str] = ()) -> str:
    """Markdown with one `# Title` per section, requested titles first, in their order."""
    order = [t for t in titles if t in sections] + [t for t in sections if t not in titles]
    return "\n\n".join(f"# {title}\n\n{sections[title]}" for title in order)


def format_answer(text: str, titles: Sequence[str]) -> tuple[str, dict[str, str] | None]:
    """(analysis markdown, sections) of a final answer that was asked for `titles`.

    A JSON answer is rendered as markdown headings, so the analysis is always readable; a
    markdown answer is kept as written (nothing before its first heading is lost).
    """
    sections, from_json = _parse(text, titles)
    if sections is None or not from_json:
        return text, sections
    return render_sections(sections, titles), sections
