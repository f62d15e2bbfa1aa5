"""Which messages a run owes its destinations now — a pure function of the run's object.

Each message has a deterministic id, `<uid>/<event>/<destination>`: the idempotency key that
`status.deliveries[]` records before every attempt and every request carries, so a restarted
(or a second) operator recognises a message as already sent or under way.

Events: `end` (an Investigation Succeeded or Failed), `turn-<i>` (a Conversation's turn i was
Answered or Failed; only the latest turn is ever due, so old records may be pruned), and
`approval-<digest>` / `turn-<i>-approval-<digest>` (calls wait for a decision; the digest of
their ids tells one pause from the next). A pause is told to destinations with `when: Always`;
an end to those whose condition holds.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lestrade.resources.common import Phase
from lestrade.resources.destination import DeliveryCondition

__all__ = ["Due", "due_messages", "has_finding", "run_finished", "NO_FINDING_ANSWERS"]

NO_FINDING_ANSWERS = frozenset(
    {
        "",
        "none",
        "no",
        "n/a",
        "na",
        "nothing",
        "nil",
        "no finding",
        "no findings",
        "nothing found",
        "no issues",
        "no issues found",
        "no problems",
        "no problems found",
        "healthy",
        "all good",
        "ok",
    }
)
"""What a check that found nothing answers (normalised: lower case, no markdown marks or
trailing punctuation). A scheduled check asks for a `Findings` section and gets one of these."""

_NO_FINDING_START = re.compile(r"^(none|no findings?|nothing found|no (issues|problems)( found)?)\b[.:;,!-]")
_MARKS = re.compile(r"[*_`#>~]+")


def _normalised(text: str) -> str:
    return _MARKS.sub("", text).strip().strip(".!").strip().lower()


def has_finding(answer: str | None, sections: Mapping[str, str] | None) -> bool:
    """Whether a successful run's answer reports something. A section titled like `Findings`
    decides when there is one; otherwise the whole answer does."""
    for title, text in (sections or {}).items():
        if "finding" in title.lower():
            return _reports(text)
    return _reports(answer or "")


def _reports(text: str) -> bool:
    normal = _normalised(text)
    return not (normal in NO_FINDING_ANSWERS or _NO_FINDING_START.match(normal))


@dataclass(frozen=True)
class Due:
    """One message owed to one destination."""

    id: str
    destination: str
    event: str
    status: str
    """`firing` (calls wait for a decision) or `resolved` (the run or turn ended), as Alertmanager says."""
    turn: int | None = None


def _digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:12]


def _condition_holds(when: str, failed: bool, finding: bool) -> bool:
    if when == DeliveryCondition.ON_FAILURE:
        return failed
    if when == DeliveryCondition.ON_FINDING:
        return failed or finding
    return True


def run_finished(body: Mapping[str, Any]) -> bool:
    """Nothing more will happen to the run until someone asks again (an Investigation ended;
    a Conversation's turns are all settled)."""
    status = body.get("status") or {}
    phase = status.get("phase")
    if body.get("kind") == "Conversation":
        asked = len((body.get("spec") or {}).get("turns") or [])
        turns = status.get("turns") or []
        return len(turns) >= asked and all(t.get("phase") in (Phase.ANSWERED, Phase.FAILED) for t in turns)
    return phase in (Phase.SUCCEEDED, Phase.FAILED)


def due_messages(body: Mapping[str, Any]) -> list[Due]:
    """The messages the run owes now (sent or not: the caller compares with status.deliveries)."""
    spec = body.get("spec") or {}
    targets = spec.get("deliver") or []
    if not targets:
        return []
    uid = (body.get("metadata") or {}).get("uid", "")
    status = body.get("status") or {}
    turn: int | None = None
    if body.get("kind") == "Conversation":
        turns = status.get("turns") or []
        if not turns:
            return []
        turn = len(turns) - 1
        latest = turns[turn]
        phase, answer, sections = latest.get("phase"), latest.get("answer"), None
        prefix = f"turn-{turn}"
    else:
        phase, answer, sections = status.get("phase"), status.get("analysis"), status.get("sections")
        prefix = ""

    messages: list[Due] = []
    seen: set[str] = set()
    for target in targets:
        name, when = target.get("destination"), target.get("when") or DeliveryCondition.ALWAYS
        if not name or name in seen:
            continue
        seen.add(name)
        if phase == Phase.AWAITING_APPROVAL:
            waiting = [p.get("toolCallId", "") for p in status.get("pendingApprovals") or []]
            if not waiting or when != DeliveryCondition.ALWAYS:
                continue
            event = "-".join(filter(None, [prefix, "approval", _digest(waiting)]))
            messages.append(Due(f"{uid}/{event}/{name}", name, event, "firing", turn))
        elif phase in (Phase.SUCCEEDED, Phase.ANSWERED, Phase.FAILED):
            failed = phase == Phase.FAILED
            finding = not failed and has_finding(answer, sections)
            if not _condition_holds(when, failed, finding):
                continue
            event = prefix or "end"
            messages.append(Due(f"{uid}/{event}/{name}", name, event, "resolved", turn))
    return messages
