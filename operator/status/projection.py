"""How a run's progress shows in its resource's status, per kind.

The run pipeline (`attempt.py`, `supervisor.py`) is the same for both kinds; what differs is
where its facts land: an Investigation has one run (phase, analysis, sections, toolCalls at
the top level), a Conversation has one run per turn (`turns[i]`, `version`, and the latest
turn's toolCalls at the top level). Every field is written through the resource models, and
every count comes from the transcript (`lestrade.runs.progress.run_facts`), never from
what an earlier status said.

Progress writes (coalesced, every status interval) carry only small top-level fields;
Conversation `turns` — the whole list, as merge patches replace lists — is sent at milestones.
"""

from __future__ import annotations

from typing import Any

from lestrade.operator.status.writer import StatusWriter
from lestrade.resources.common import FINISHED_PHASES, Phase, Usage
from lestrade.resources.constants import (
    CONDITION_ANSWERED,
    CONDITION_AWAITING_APPROVAL,
    CONDITION_SUCCEEDED,
)
from lestrade.resources.conversation import TurnStatus
from lestrade.resources.destination import DELIVERY_PENDING
from lestrade.resources.investigation import Finding
from lestrade.runs.findings import findings
from lestrade.runs.progress import RunFacts, run_facts
from lestrade.runs.records import Record
from lestrade.runs.transcript import RecordType, TranscriptState
from lestrade.runs.views import ConversationView, RunView
from lestrade.timefmt import now_iso, parse_time

__all__ = ["Projection", "InvestigationProjection", "ConversationProjection", "projection_for"]

MAX_ANALYSIS_CHARS = 64 * 1024
MAX_SECTION_CHARS = 16 * 1024
RECENT_TURN_ANSWER_CHARS = 16 * 1024
OLD_TURN_ANSWER_CHARS = 1024
RECENT_TURNS = 3


def cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + "\n\n…(truncated in status; the transcript has the full text)"


class Projection:
    """Writes one kind's status for the current unit of work (the run, or one turn)."""

    done_phase: Phase
    condition_done: str

    def __init__(self, writer: StatusWriter, view: RunView) -> None:
        self.writer = writer
        self.view = view
        self.since = 0
        """The seq where the current unit of work starts in the transcript."""
        if (view.body.get("spec") or {}).get("deliver"):
            # With every milestone of a run that names destinations, its deliveries are open
            # again: the operator's delivery watch (`lestrade.operator.delivery`) asks for
            # exactly these runs, and marks them Done once everything due was sent.
            # Sent even when the writer believes it stored already: the delivery watch may have
            # marked it Done since the status this writer started from.
            writer.current.pop("delivery", None)
            writer.set(delivery=DELIVERY_PENDING)

    def facts(self, state: TranscriptState, *, settled: bool = False) -> RunFacts:
        return run_facts(state, self.since, settled=settled)

    # -- milestones shared by both kinds ----------------------------------------------------------

    def _conditions_running(self, note: str) -> None:
        self.writer.set_condition(self.condition_done, "Unknown", "Running", note)
        if self.writer.condition_status(CONDITION_AWAITING_APPROVAL) == "True":
            self.writer.set_condition(CONDITION_AWAITING_APPROVAL, False, "Decided", note)

    def _conditions_failed(self, reason: str, message: str) -> None:
        self.writer.set_condition(self.condition_done, False, reason, message)
        if self.writer.condition_status(CONDITION_AWAITING_APPROVAL) == "True":
            self.writer.set_condition(CONDITION_AWAITING_APPROVAL, False, reason, message)

    def _conditions_awaiting(self, message: str) -> None:
        self.writer.set_condition(CONDITION_AWAITING_APPROVAL, True, "ToolCallsNeedApproval", message)

    def _conditions_done(self, reason: str, message: str) -> None:
        self.writer.set_condition(self.condition_done, True, reason, message)
        if self.writer.condition_status(CONDITION_AWAITING_APPROVAL) == "True":
            self.writer.set_condition(CONDITION_AWAITING_APPROVAL, False, reason, message)

    # -- per kind ---------------------------------------------------------------------------------

    def pending(self, reason: str, message: str) -> None:
        raise NotImplementedError

    def running(self, note: str, start_time: str, model: str, transcript: dict[str, Any]) -> None:
        raise NotImplementedError

    def progress(self, state: TranscriptState, message: str | None = None) -> None:
        raise NotImplementedError

    def awaiting(self, state: TranscriptState, message: str, transcript: dict[str, Any]) -> None:
        raise NotImplementedError

    def done(
        self,
        state: TranscriptState,
        text: str,
        sections: dict[str, str] | None,
        message: str,
        transcript: dict[str, Any],
    ) -> None:
        raise NotImplementedError

    def failed(self, state: TranscriptState | None, reason: str, message: str) -> None:
        raise NotImplementedError


class InvestigationProjection(Projection):
    done_phase = Phase.SUCCEEDED
    condition_done = CONDITION_SUCCEEDED

    def _facts_fields(self, facts: RunFacts) -> dict[str, Any]:
        return {
            "steps": facts.steps,
            "toolCalls": facts.tool_calls,
            "toolCallCount": facts.tool_call_count,
            "usage": facts.usage,
        }

    def pending(self, reason: str, message: str) -> None:
        self.writer.set_condition(CONDITION_SUCCEEDED, "Unknown", reason, message)
        self.writer.set(phase=Phase.PENDING.value, message=message)

    def running(self, note: str, start_time: str, model: str, transcript: dict[str, Any]) -> None:
        self._conditions_running(note)
        self.writer.set(
            phase=Phase.RUNNING.value,
            startTime=start_time,
            model=model,
            message=note,
            pendingApprovals=[],
            transcript=transcript,
        )

    def progress(self, state: TranscriptState, message: str | None = None) -> None:
        self.writer.set_lazy("facts", lambda: self._facts_fields(self.facts(state)))
        if message is not None:
            self.writer.set(message=message)

    def awaiting(self, state: TranscriptState, message: str, transcript: dict[str, Any]) -> None:
        facts = self.facts(state)
        self._conditions_awaiting(message)
        self.writer.set(
            phase=Phase.AWAITING_APPROVAL.value,
            message=message,
            pendingApprovals=facts.pending_approvals,
            transcript=transcript,
            **self._facts_fields(facts),
        )

    def done(
        self,
        state: TranscriptState,
        text: str,
        sections: dict[str, str] | None,
        message: str,
        transcript: dict[str, Any],
    ) -> None:
        self._conditions_done("Completed", message)
        self.writer.set(
            phase=Phase.SUCCEEDED.value,
            analysis=cap(text, MAX_ANALYSIS_CHARS),
            sections={t: cap(s, MAX_SECTION_CHARS) for t, s in sections.items()} if sections else None,
            message=message,
            pendingApprovals=[],
            completionTime=now_iso(),
            transcript=transcript,
            **self._facts_fields(self.facts(state, settled=True)),
            **findings_fields(state, sections),
        )

    def failed(self, state: TranscriptState | None, reason: str, message: str) -> None:
        self._conditions_failed(reason, message)
        self.writer.set(
            phase=Phase.FAILED.value,
            message=message,
            pendingApprovals=[],
            completionTime=now_iso(),
        )
        if state is not None:
            self.writer.set(**self._facts_fields(self.facts(state, settled=True)))


def findings_fields(state: TranscriptState, sections: dict[str, str] | None) -> dict[str, Any]:
    """`findings` and `groundedFindings` of an answer's sections, checked against every call
    the run made (the transcript's, not status' capped list)."""
    if not sections:
        return {}
    ids = {str(part.get("id")) for message in state.messages for part in message.get("tool_calls") or []}
    stated = findings(sections, ids)
    if not stated:
        return {}
    return {
        "findings": [
            Finding(
                section=cap(f.section, 200),
                text=cap(f.text, 1000),
                evidence=list(f.evidence[:50]),
                grounded=f.grounded,
                problem=f.problem and cap(f.problem, 1000),
            )
            for f in stated
        ],
        "groundedFindings": f"{sum(f.grounded for f in stated)}/{len(stated)}",
    }


class ConversationProjection(Projection):
    """Turn `index` of a Conversation; `turns` is rebuilt from the transcript at milestones."""

    done_phase = Phase.ANSWERED
    condition_done = CONDITION_ANSWERED
    view: ConversationView

    def __init__(self, writer: StatusWriter, view: ConversationView) -> None:
        super().__init__(writer, view)
        index = view.current_turn
        self.index = len(view.asks) - 1 if index is None else index
        self.turns = [TurnStatus.model_validate(t) for t in view.turn_statuses]
        self.base_usage = Usage()
        """Usage of the turns before this one (from the transcript, once)."""

    def attach(self, state: TranscriptState) -> None:
        """Start of the turn in the transcript known: rebuild every turn from it."""
        self.since = state.turns.get(self.index, len(state.records))
        self.turns = conversation_turns(state, self.view.asks, self.turns, self.index)
        self.base_usage = run_facts(state, 0, self.since).usage

    def _turn(self, **fields: Any) -> None:
        while len(self.turns) <= self.index:
            self.turns.append(TurnStatus(ask=self.view.asks[len(self.turns)]))
        self.turns[self.index] = _updated(self.turns[self.index], fields)
        self.writer.set(turns=_capped(self.turns), askedTurns=len(self.view.asks))

    def _total(self, facts: RunFacts) -> Usage:
        b, c = self.base_usage, facts.usage
        return Usage(
            prompt_tokens=b.prompt_tokens + c.prompt_tokens,
            completion_tokens=b.completion_tokens + c.completion_tokens,
            total_tokens=b.total_tokens + c.total_tokens,
            cached_tokens=b.cached_tokens + c.cached_tokens,
            cost=round(b.cost + c.cost, 8),
        )

    def _facts_turn(self, facts: RunFacts) -> dict[str, Any]:
        return {"steps": facts.steps, "tool_call_count": facts.tool_call_count, "usage": facts.usage}

    def pending(self, reason: str, message: str) -> None:
        self.writer.set_condition(CONDITION_ANSWERED, "Unknown", reason, message)
        self._turn(phase=Phase.PENDING, message=message)
        self.writer.set(phase=Phase.PENDING.value, message=message)

    def running(self, note: str, start_time: str, model: str, transcript: dict[str, Any]) -> None:
        self._conditions_running(note)
        self._turn(phase=Phase.RUNNING, start_time=parse_time(start_time), message=note)
        self.writer.set(
            phase=Phase.RUNNING.value,
            model=model,
            message=note,
            pendingApprovals=[],
            transcript=transcript,
            lastActivityTime=start_time,
        )

    def progress(self, state: TranscriptState, message: str | None = None) -> None:
        def fields() -> dict[str, Any]:
            facts = self.facts(state)
            return {"toolCalls": facts.tool_calls, "usage": self._total(facts), "version": state.version}

        self.writer.set_lazy("facts", fields)
        if message is not None:
            self.writer.set(message=message)

    def awaiting(self, state: TranscriptState, message: str, transcript: dict[str, Any]) -> None:
        facts = self.facts(state)
        self._conditions_awaiting(message)
        self._turn(phase=Phase.AWAITING_APPROVAL, message=message, **self._facts_turn(facts))
        self.writer.set(
            phase=Phase.AWAITING_APPROVAL.value,
            message=message,
            pendingApprovals=facts.pending_approvals,
            transcript=transcript,
            toolCalls=facts.tool_calls,
            usage=self._total(facts),
            version=state.version,
        )

    def relays_settled(self, state: TranscriptState, note: str) -> None:
        """A harness session's relays are all decided and the turn runs on (its attempt never
        stopped: the relays waited inside it)."""
        facts = self.facts(state)
        self._conditions_running(note)
        self._turn(phase=Phase.RUNNING, message=note, **self._facts_turn(facts))
        self.writer.set(
            phase=Phase.RUNNING.value,
            message=note,
            pendingApprovals=[],
            toolCalls=facts.tool_calls,
            usage=self._total(facts),
            version=state.version,
        )

    def done(
        self,
        state: TranscriptState,
        text: str,
        sections: dict[str, str] | None,
        message: str,
        transcript: dict[str, Any],
    ) -> None:
        facts = self.facts(state, settled=True)
        now = now_iso()
        self._turn(
            phase=Phase.ANSWERED,
            answer=text,
            message=message,
            completion_time=parse_time(now),
            **self._facts_turn(facts),
        )
        all_done = all(t.phase in FINISHED_PHASES for t in self.turns) and len(self.turns) >= len(self.view.asks)
        if all_done:
            self._conditions_done("Answered", message)
        self.writer.set(
            phase=Phase.ANSWERED.value if all_done else Phase.PENDING.value,
            message=message,
            pendingApprovals=[],
            transcript=transcript,
            toolCalls=facts.tool_calls,
            usage=self._total(facts),
            version=state.version,
            answeredTurns=sum(1 for t in self.turns if t.phase == Phase.ANSWERED),
            lastActivityTime=now,
        )

    def failed(self, state: TranscriptState | None, reason: str, message: str) -> None:
        self._conditions_failed(reason, message)
        now = now_iso()
        fields: dict[str, Any] = {}
        if state is not None:
            facts = self.facts(state, settled=True)
            fields = self._facts_turn(facts)
            self.writer.set(toolCalls=facts.tool_calls, usage=self._total(facts), version=state.version)
        self._turn(phase=Phase.FAILED, message=message, completion_time=parse_time(now), **fields)
        self.writer.set(
            phase=Phase.FAILED.value,
            message=message,
            pendingApprovals=[],
            lastActivityTime=now,
            answeredTurns=sum(1 for t in self.turns if t.phase == Phase.ANSWERED),
        )


def _updated(turn: TurnStatus, fields: dict[str, Any]) -> TurnStatus:
    """The turn with `fields` changed, validated (so a `Phase` becomes the turn's own enum)."""
    return TurnStatus.model_validate({**turn.model_dump(), **fields})


def _capped(turns: list[TurnStatus]) -> list[TurnStatus]:
    """Status stays small: the latest answers in full (up to a limit), older ones as excerpts."""
    recent = len(turns) - RECENT_TURNS
    return [
        t
        if t.answer is None
        else t.model_copy(
            update={"answer": cap(t.answer, RECENT_TURN_ANSWER_CHARS if i >= recent else OLD_TURN_ANSWER_CHARS)}
        )
        for i, t in enumerate(turns)
    ]


def _turn_start(record: Record) -> str | None:
    """When a turn started: its `turn` record's time."""
    return record.get("at") if record["t"] == RecordType.TURN else None


def conversation_turns(
    state: TranscriptState, asks: list[str], known: list[TurnStatus], current: int
) -> list[TurnStatus]:
    """Every turn before `current` as its transcript records say (answer or error, usage,
    counts, times); what the transcript does not know (a turn that failed before it started)
    stays as status said."""
    result = [known[i] if i < len(known) else TurnStatus(ask=asks[i]) for i in range(current)]
    starts = sorted(state.turns.items())
    for position, (index, seq) in enumerate(starts):
        if index >= current:
            break
        end = starts[position + 1][1] if position + 1 < len(starts) else len(state.records)
        facts = run_facts(state, seq, end, settled=True)
        update: dict[str, Any] = {
            "ask": asks[index],
            "steps": facts.steps,
            "tool_call_count": facts.tool_call_count,
            "usage": facts.usage,
            "start_time": parse_time(_turn_start(state.records[seq])),
        }
        for record in state.records[seq:end]:
            if record["t"] == RecordType.ANSWER:
                update.update(
                    phase=Phase.ANSWERED, answer=record.get("text") or "", completion_time=parse_time(record.get("at"))
                )
            elif record["t"] == RecordType.ERROR:
                update.update(
                    phase=Phase.FAILED,
                    message=record.get("message") or "",
                    completion_time=parse_time(record.get("at")),
                )
        result[index] = _updated(result[index], update)
    return result


def projection_for(writer: StatusWriter, view: RunView) -> Projection:
    if isinstance(view, ConversationView):
        return ConversationProjection(writer, view)
    return InvestigationProjection(writer, view)
