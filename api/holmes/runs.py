"""The events of one unit of work — an Investigation, or one Conversation turn — from a
position in its progress sequence until it ends (answer, error, or a pause for approval).

Both the SSE endpoints and the plain JSON endpoints read a run this way: the JSON endpoints
simply wait for the last event. Events come from the transcript (`holmes_events`); the status
is only consulted for failures that never reached the transcript (an invalid spec or model).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from lestrade.api.base.follow import Follower, Snapshot
from lestrade.api.holmes.events import (
    TERMINAL_RECORDS,
    Event,
    EventPosition,
    RunKind,
    error_payload,
    events_after,
)
from lestrade.resources import CONVERSATION_PLURAL, INVESTIGATION_PLURAL
from lestrade.runs.transcript import TranscriptState

__all__ = ["RunCursor", "follow_run", "END_EVENTS", "LAST_INDEX", "SHORT_NAMES"]

END_EVENTS = frozenset({"ai_answer_end", "approval_required", "error"})
LAST_INDEX = 1 << 20
"""An event index past any record's last event: (seq, LAST_INDEX) means "record seq done"."""
FAILURE_INDEX = LAST_INDEX + 1
"""The index of the error event made from status (a failure with no `error` record)."""

SHORT_NAMES = {"conv": CONVERSATION_PLURAL, "inv": INVESTIGATION_PLURAL}


@dataclass(frozen=True)
class RunCursor:
    """A stream's place: which resource, which turn (Conversation), and the last event
    delivered (None: from the start of the run or turn)."""

    plural: str
    namespace: str
    name: str
    turn: int | None = None
    after: EventPosition | None = None

    @property
    def kind(self) -> RunKind:
        return "chat" if self.plural == CONVERSATION_PLURAL else "investigation"

    @property
    def short(self) -> str:
        return "conv" if self.plural == CONVERSATION_PLURAL else "inv"

    def event_id(self, position: EventPosition) -> str:
        """`conv/<name>/<seq>[.<n>]`: says which resource, so a reconnect that carries only
        this id (fetch-event-source re-sends the same POST) finds the same stream."""
        return f"{self.short}/{self.name}/{position}"

    @classmethod
    def from_event_id(cls, text: str, namespace: str) -> RunCursor:
        short, name, position = text.strip().split("/")
        if short not in SHORT_NAMES or not name:
            raise ValueError(text)
        return cls(SHORT_NAMES[short], namespace, name, None, EventPosition.parse(position))


def _start(state: TranscriptState, cursor: RunCursor) -> int | None:
    """The seq where the run (turn) starts; None while its turn has not started."""
    if cursor.kind == "investigation":
        return 0
    assert cursor.turn is not None
    return state.turns.get(cursor.turn)


def _turn_of(state: TranscriptState, seq: int) -> int | None:
    starts = [index for index, start in state.turns.items() if start <= seq]
    return max(starts) if starts else None


def _ended_at(state: TranscriptState, after: EventPosition, kind: RunKind) -> bool:
    """The stream already delivered the last event of a terminal record (or the failure
    that status reported)."""
    if after.index == FAILURE_INDEX:
        return True
    if after.seq >= len(state.records) or state.records[after.seq]["t"] not in TERMINAL_RECORDS:
        return False
    following = next(iter(events_after(state, after, kind=kind, since=0)), None)
    return following is None or following.position.seq != after.seq


def _status_failure(snapshot: Snapshot, cursor: RunCursor) -> tuple[str, str] | None:
    """A failure that status reports but the transcript does not (no `error` record)."""
    status = snapshot.status
    if cursor.kind == "investigation":
        if status.get("phase") == "Failed":
            return "Failed", str(status.get("message") or "the investigation failed")
        return None
    turns = status.get("turns") or []
    if cursor.turn is not None and cursor.turn < len(turns) and turns[cursor.turn].get("phase") == "Failed":
        return "Failed", str(turns[cursor.turn].get("message") or "the turn failed")
    return None


async def follow_run(follower: Follower, cursor: RunCursor) -> AsyncIterator[tuple[Event, Snapshot]]:
    """Yields (event, snapshot it came from) until the run or turn ends (the last event is
    one of END_EVENTS). Raises ResourceGone when the resource is deleted."""
    conversation = cursor.name if cursor.kind == "chat" else None
    async for snapshot in follower.snapshots((cursor.plural, cursor.namespace, cursor.name)):
        state = snapshot.transcript
        if cursor.kind == "chat" and cursor.turn is None:
            if cursor.after is None:
                raise ValueError("a chat stream needs a turn or a position")
            cursor = replace(cursor, turn=_turn_of(state, cursor.after.seq))
            if cursor.turn is None:
                cursor = replace(cursor, turn=0)
        start = _start(state, cursor)
        if start is None:
            failure = _status_failure(snapshot, cursor)
            if failure:
                yield _failure_event(cursor, len(state.records), *failure), snapshot
                return
            continue  # the operator has not started the turn yet
        if cursor.after is None:
            cursor = replace(cursor, after=EventPosition(start, 0))
        assert cursor.after is not None
        if _ended_at(state, cursor.after, cursor.kind):
            return
        for event in _turn_events(state, start, cursor.kind, conversation):
            if event.position <= cursor.after:
                continue
            cursor = replace(cursor, after=event.position)
            yield event, snapshot
            if event.name in END_EVENTS:
                return
        failure = _status_failure(snapshot, cursor)
        if failure:
            yield _failure_event(cursor, len(state.records), *failure), snapshot
            return


_EVENTS: OrderedDict[tuple[int, int, str, str | None], tuple[TranscriptState, list[Event]]] = OrderedDict()
EVENT_CACHE_SIZE = 128


def _turn_events(state: TranscriptState, since: int, kind: RunKind, conversation: str | None) -> list[Event]:
    """Every event of the run (turn) starting at `since`, computed once per transcript version
    for all the streams that follow it (a hundred streams of one chat cost one computation)."""
    key = (id(state), since, kind, conversation)
    cached = _EVENTS.get(key)
    if cached is not None and cached[0] is state:  # the state is kept alive: its id is not reused
        _EVENTS.move_to_end(key)
        return cached[1]
    events = list(events_after(state, EventPosition(since, 0), kind=kind, since=since, conversation=conversation))
    _EVENTS[key] = (state, events)
    while len(_EVENTS) > EVENT_CACHE_SIZE:
        _EVENTS.popitem(last=False)
    return events


def _failure_event(cursor: RunCursor, records: int, reason: str, message: str) -> Event:
    # Positioned after every stored record: a reconnect finds nothing more and ends.
    return Event(EventPosition(max(records - 1, 0), FAILURE_INDEX), "error", error_payload(reason, message))
