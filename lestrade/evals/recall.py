"""Evidence recall: did every evidence fact of a scenario reach the model's input, and if not,
where was it lost?

The model's input is what the model server received: every request body of the scenario's
conversation. A fact that is in none of them is attributed to the first stage of the pipeline
where it went missing, from what the harness saw of each planned call:

- `no tool`    the plan names a tool the run does not have, or the fact is not in the raw
               output of any planned call (the tools cannot show it);
- `redacted`   it is in a raw output but redaction removed it;
- `truncated`  it survived redaction but not the size caps (the tool's character cap, the
               context window's token share for one result);
- `compacted`  its call's result never reached a request although the run went on (the
               window was compacted before the model saw it);
- `not run`    the run ended before the call (a failure; the run's message says why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lestrade.evals.scenario import Evidence, Scenario
from lestrade.runs.findings import cited_ids, findings

__all__ = ["CallTrace", "FactResult", "Recall", "cited_ids", "model_inputs", "measure", "TRUNCATION_MARKERS"]

TRUNCATION_MARKERS = ("[TRUNCATED]", "characters truncated", "[output truncated at", "[... truncated]")


@dataclass
class CallTrace:
    """What the harness saw of one planned call outside the run: its raw output (before
    redaction and caps) and the redacted one; `tool_missing` when the run has no such tool."""

    id: str
    tool: str
    raw: str = ""
    redacted: str = ""
    tool_missing: bool = False


@dataclass
class FactResult:
    fact: Evidence
    reached: bool
    lost: str | None = None
    """None when reached; else no tool, redacted, truncated, compacted or not run."""


@dataclass
class Recall:
    scenario: str
    facts: list[FactResult]
    tokens: int = 0
    phase: str = ""
    message: str = ""
    citations: list[str] = field(default_factory=list)
    """Problems with the answer's citations (ids that are not calls of the run)."""
    unoffered: list[str] = field(default_factory=list)
    """Planned calls of tools the model was not offered at that turn (a deferred toolset the
    plan had not opened): a real model could not have made them, so the run proves nothing."""
    seconds: float = 0.0
    staging_seconds: float = 0.0

    @property
    def covered(self) -> bool:
        return all(f.reached for f in self.facts) and not self.citations and not self.unoffered

    @property
    def reached(self) -> int:
        return sum(1 for f in self.facts if f.reached)

    def losses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.facts:
            if f.lost:
                out[f.lost] = out.get(f.lost, 0) + 1
        return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    return "" if content is None else str(content)


def model_inputs(requests: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, str]]:
    """(all message text of every request, tool_call_id -> the tool result the model got)."""
    texts: list[str] = []
    results: dict[str, str] = {}
    for body in requests:
        for message in body.get("messages") or []:
            text = _content_text(message.get("content"))
            texts.append(text)
            if message.get("role") == "tool" and message.get("tool_call_id"):
                results[str(message["tool_call_id"])] = text
    return "\n".join(texts), results


def _attribute(fact: Evidence, traces: Sequence[CallTrace], results: Mapping[str, str]) -> str:
    if any(t.tool_missing for t in traces) and not any(fact.found_in(t.raw) for t in traces):
        return "no tool"
    raw = [t for t in traces if fact.found_in(t.raw)]
    if not raw:
        return "no tool"
    redacted = [t for t in raw if fact.found_in(t.redacted)]
    if not redacted:
        return "redacted"
    delivered = [t for t in redacted if t.id in results]
    if not delivered:
        return "compacted" if any(t.id in results for t in traces) else "not run"
    if any(any(m in results[t.id] for m in TRUNCATION_MARKERS) for t in delivered):
        return "truncated"
    return "truncated"  # delivered without the fact: cut in a way that left no marker


def measure(
    scenario: Scenario,
    requests: Sequence[Mapping[str, Any]],
    traces: Sequence[CallTrace],
    *,
    sections: Mapping[str, str] | None = None,
    call_ids: Sequence[str] = (),
    tokens: int = 0,
    phase: str = "",
    message: str = "",
) -> Recall:
    """The scenario's recall from the requests the model received; with the answer's
    `sections`, also whether each of its findings cites calls the run made."""
    seen, results = model_inputs(requests)
    facts = []
    for fact in scenario.evidence:
        if fact.found_in(seen):
            facts.append(FactResult(fact, True))
        else:
            facts.append(FactResult(fact, False, _attribute(fact, traces, results)))
    problems: list[str] = []
    if sections is not None:
        stated = findings(sections, call_ids)
        if not stated:
            problems.append("the answer states no findings")
        problems += sorted({f"{f.section}: {f.problem}" for f in stated if f.problem})
    return Recall(scenario.name, facts, tokens=tokens, phase=phase, message=message, citations=problems)
