"""Grounded findings: each conclusion of an answer names the tool calls it rests on.

The model is asked to end every finding with `[evidence: <tool call id>, ...]`, the ids of the
calls whose results show it. A finding is a bullet, a numbered item or a paragraph of the
sections that state conclusions (all but next steps and links); it is *grounded* when it cites at
least one id and every id it cites is a call of the run. One that cites nothing, or an id the run
never made (a model inventing its evidence), is flagged with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["CITATION", "Finding", "cited_ids", "findings", "MAX_FINDINGS"]

CITATION = re.compile(r"\[evidence:\s*([^\]]*)\]", re.IGNORECASE)
MAX_FINDINGS = 30
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
# Sections that advise rather than conclude: their items need no evidence.
_UNCHECKED = re.compile(r"next step|link|reference|app or infra|remediation", re.IGNORECASE)


def cited_ids(text: str) -> list[str]:
    """Tool call ids cited as `[evidence: id, id]` in `text`, in order, without repeats."""
    out: list[str] = []
    for match in CITATION.finditer(text):
        for part in match.group(1).split(","):
            call_id = part.strip().strip("`'\"")
            if call_id and call_id not in out:
                out.append(call_id)
    return out


@dataclass(frozen=True)
class Finding:
    section: str
    text: str
    evidence: tuple[str, ...]
    problem: str | None = None
    """None when grounded; else why not: it cites nothing, or ids that are not calls of the run."""

    @property
    def grounded(self) -> bool:
        return self.problem is None


def _items(body: str) -> Iterable[str]:
    """Top-level bullets and numbered items (nested items and other lines continue them), else
    paragraphs."""
    lines = body.splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines if _ITEM.match(line)]
    if indents:
        top = min(indents)
        current: list[str] = []
        for line in lines:
            if _ITEM.match(line) and len(line) - len(line.lstrip()) == top:
                if current:
                    yield "\n".join(current)
                current = [_ITEM.sub("", line, count=1)]
            elif current and line.strip():
                current.append(line.strip())
            elif line.strip():  # prose before the first item
                yield line.strip()
        if current:
            yield "\n".join(current)
        return
    for paragraph in re.split(r"\n\s*\n", body):
        if paragraph.strip():
            yield paragraph.strip()


def findings(sections: Mapping[str, str], call_ids: Collection[str]) -> list[Finding]:
    """The findings of the concluding sections, each checked against the run's call ids."""
    known = set(call_ids)
    out: list[Finding] = []
    for title, body in sections.items():
        if _UNCHECKED.search(title) or not body:
            continue
        for item in _items(body):
            # code and quotes (a notice, a log excerpt) are not conclusions
            if item.startswith(("```", ">")) or not re.search(r"\w", CITATION.sub("", item)):
                continue
            ids = tuple(cited_ids(item))
            unknown = [i for i in ids if i not in known]
            problem = None
            if not ids:
                problem = "cites no tool call"
            elif unknown:
                problem = "cites calls the run never made: " + ", ".join(unknown)
            out.append(Finding(title, item, ids, problem))
            if len(out) >= MAX_FINDINGS:
                return out
    return out
