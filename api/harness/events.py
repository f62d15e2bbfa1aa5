"""Reference 003's harness events, derived from a harness session's transcript (pure).

The operator records everything an agent of the session does (`lestrade.runs.transcript`;
a subagent's records carry its `agentId`, `parentId` and `depth`), so the events are computed
from the stored records alone: any API process, before or after a restart of either side,
streams the same events. Mapping, record by record from the turn's start:

- `turn` -> `harness_start` of the main agent (`agent` start -> a subagent's);
- `agent` reasoning record (stored before its assistant message) -> `reasoning`;
- assistant message -> `text` (if any), one `tool_call` per call;
- tool message -> `tool_result` (`output`: the result, `{status: "denied", reason}` or
  `{error}`, from the `tool_result` and `decision` records before it);
- `approval_needed` -> one `relay` (kind `permission`) per call not relayed before;
- `tokens` -> `usage`;
- `answer` -> `harness_end` of the main agent (`agent` end -> a subagent's); `reason` is
  `max_iterations` when the agent used all its iterations, else `final`;
- `error` -> `error` (a run that used all its iterations without answering ends with
  `harness_end` reason `max_iterations` instead);
- `agent` emit record -> the event it names (the `rlm` mode's loop: `text`, `reasoning`,
  `tool_call`, `tool_result`), with this run's `runId` and `agentId`.

Every event carries `runId` and `agentId`; a subagent's also `parentId` (the spawning tool
call's id) and `depth`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lestrade.runs.records import AgentFields, AgentRecord, MessageRecord, Record
from lestrade.runs.transcript import RecordType, TranscriptState

__all__ = ["HarnessEvent", "MAIN_AGENT_ID", "harness_events", "END_EVENTS", "run_id", "error_event"]

MAIN_AGENT_ID = "main"
END_EVENTS = frozenset({"harness_end", "error"})
"""Events that end the stream (only the main agent's `harness_end` does)."""
MAX_STEPS_REASON = "MaxStepsReached"
_DERIVED = frozenset({"connected", "harness_start", "harness_end", "relay", "error", "usage"})
"""Events made from the records themselves (session start and end, relays, failures, token
counts); a recorded `emit` may not stand in for one of them."""


@dataclass(frozen=True)
class HarnessEvent:
    seq: int
    index: int
    name: str
    data: dict[str, Any]

    @property
    def position(self) -> tuple[int, int]:
        return (self.seq, self.index)

    @property
    def ends_stream(self) -> bool:
        if self.name == "error":
            return bool(self.data.get("fatal", True))
        return self.name == "harness_end" and self.data.get("agentId") == MAIN_AGENT_ID


def run_id(session: str, turn: int) -> str:
    """One run per POST /chat: the session (Conversation) and its turn."""
    return f"{session}/{turn}"


def _agent(record: AgentFields) -> dict[str, Any]:
    """Which agent a record (or a waiting call) is of."""
    if record.get("agentId"):
        return {"agentId": record["agentId"], "parentId": record.get("parentId"), "depth": record.get("depth", 1)}
    return {"agentId": MAIN_AGENT_ID}


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


class _Mapper:
    def __init__(self, run: str, max_iterations: int) -> None:
        self.run = run
        self.max_iterations = max_iterations
        self.names: dict[str, str] = {}
        self.status: dict[str, str] = {}
        self.reasons: dict[str, str | None] = {}
        self.relayed: set[str] = set()
        self.iterations: dict[str, int] = {}
        self.usage: dict[str, dict[str, int]] = {}
        self.total = {"inputTokens": 0, "outputTokens": 0}

    def _base(self, record: Record) -> dict[str, Any]:
        return {"runId": self.run, **_agent(record)}

    def map(self, seq: int, record: Record) -> list[tuple[str, dict[str, Any]]]:
        base = self._base(record)
        agent = base["agentId"]
        if record["t"] == RecordType.TURN:
            return [("harness_start", {**base, "depth": 0, "maxIterations": self.max_iterations})]
        if record["t"] == RecordType.AGENT:
            if record.get("event") == "reasoning":
                return [("reasoning", {**base, "id": f"reasoning-{seq}", "content": str(record.get("content") or "")})]
            if record.get("event") == "start":
                return [("harness_start", {**base, "maxIterations": record.get("maxIterations", self.max_iterations)})]
            if record.get("event") == "emit":
                return self._emitted(seq, record, base)
            if record.get("event") != "end":
                return []
            end = {
                **base,
                "reason": "max_iterations" if record.get("reason") == "max_iterations" else "final",
                "iterations": int(record.get("iterations") or 0),
                "usage": self.usage.get(agent, {"inputTokens": 0, "outputTokens": 0}),
            }
            events: list[tuple[str, dict[str, Any]]] = []
            if record.get("reason") == "error":
                events.append(("error", _error(base, str(record.get("error") or "the subagent failed"))))
                events = [("subagent_error", events[0][1])]
            return [*events, ("harness_end", end)]
        if record["t"] == RecordType.MESSAGE:
            return self._message(seq, record, base)
        if record["t"] == RecordType.TOOL_RESULT:
            self.status[record["id"]] = str(record.get("status") or "")
            return []
        if record["t"] == RecordType.DECISION:
            self.reasons[record["id"]] = record.get("reason")
            return []
        if record["t"] == RecordType.APPROVAL_NEEDED:
            out = []
            for pending in record.get("pending") or []:
                call_id = pending.get("toolCallId")
                if not call_id or call_id in self.relayed:
                    continue
                self.relayed.add(call_id)
                out.append(
                    (
                        "relay",
                        {
                            "kind": "permission",
                            "runId": self.run,
                            **_agent(pending),
                            "id": call_id,
                            "toolCallId": call_id,
                            "tool": pending.get("toolName") or "",
                            "params": pending.get("params") or {},
                        },
                    )
                )
            return out
        if record["t"] == RecordType.TOKENS:
            usage = {
                "inputTokens": int(record.get("promptTokens") or 0),
                "outputTokens": int(record.get("completionTokens") or 0),
            }
            mine = self.usage.setdefault(agent, {"inputTokens": 0, "outputTokens": 0})
            for key, value in usage.items():
                mine[key] += value
                self.total[key] += value
            return [("usage", {**base, **usage})]
        if record["t"] == RecordType.ANSWER:
            iterations = self.iterations.get(MAIN_AGENT_ID, 0)
            reason = "max_iterations" if iterations >= self.max_iterations else "final"
            if record.get("reason") in ("final", "max_iterations"):  # the rlm loop says itself
                reason, iterations = record["reason"], int(record.get("iterations") or 0)
            return [("harness_end", {**base, "reason": reason, "iterations": iterations, "usage": dict(self.total)})]
        if record["t"] == RecordType.ERROR:
            if record.get("reason") == MAX_STEPS_REASON:
                return [
                    (
                        "harness_end",
                        {
                            **base,
                            "reason": "max_iterations",
                            "iterations": self.iterations.get(MAIN_AGENT_ID, 0),
                            "usage": dict(self.total),
                        },
                    )
                ]
            return [("error", _error(base, str(record.get("message") or record.get("reason") or "error")))]
        return []

    def _emitted(self, seq: int, record: AgentRecord, base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """An event the operator recorded as it was emitted (the `rlm` mode's loop: `text`,
        `reasoning`, `tool_call`/`tool_result` of its REPL blocks and of the tools the code
        calls): passed on with this run's ids, which its own fields cannot override; `text` and
        `reasoning` get an `id` when they have none."""
        name = str(record.get("type") or "")
        if not name or name in _DERIVED:
            return []
        fields = record.get("fields") if isinstance(record.get("fields"), dict) else {}
        if name == "tool_call" and isinstance(fields.get("id"), str):  # type: ignore[union-attr]
            self.names[fields["id"]] = str(fields.get("name") or "")  # type: ignore[index,union-attr]
        event = {k: v for k, v in fields.items() if k != "type"}  # type: ignore[union-attr]
        if name in ("text", "reasoning"):
            event.setdefault("id", f"{name}-{seq}")
        return [(name, {**event, **base})]

    def _message(self, seq: int, record: MessageRecord, base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        message = record.get("message") or {}
        role = message.get("role")
        out: list[tuple[str, dict[str, Any]]] = []
        if role == "assistant":
            agent = base["agentId"]
            self.iterations[agent] = self.iterations.get(agent, 0) + 1
            text = _content_text(message.get("content"))
            if text:
                out.append(("text", {**base, "id": f"text-{seq}", "content": text}))
            for part in message.get("tool_calls") or []:
                fn = part.get("function") or {}
                call_id = str(part.get("id") or "")
                self.names[call_id] = str(fn.get("name") or "")
                out.append(
                    (
                        "tool_call",
                        {
                            **base,
                            "id": call_id,
                            "name": self.names[call_id],
                            "input": _arguments(fn.get("arguments")),
                        },
                    )
                )
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            content = _content_text(message.get("content"))
            status = self.status.get(call_id, "success")
            output: Any
            if status == "denied":
                output = {"status": "denied", "reason": self.reasons.get(call_id) or content}
            elif status == "error":
                output = {"error": content.removeprefix("Error: ")}
            else:
                output = content
            out.append(("tool_result", {**base, "id": call_id, "name": self.names.get(call_id, ""), "output": output}))
        return out


def _error(base: dict[str, Any], message: str) -> dict[str, Any]:
    """003's error event carries the text as `message` (the reference server serializes the
    Error so); `error` repeats it for clients written against 003's field table."""
    return {**base, "message": message, "error": message}


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def error_event(run: str, message: str) -> dict[str, Any]:
    """The main agent's `error` event for a failure that never reached the transcript."""
    return {"type": "error", **_error({"runId": run, "agentId": MAIN_AGENT_ID}, message)}


def harness_events(state: TranscriptState, start: int, run: str, max_iterations: int) -> Iterator[HarnessEvent]:
    """The events of the run (turn) whose `turn` record is at `start`, in order; a
    subagent's failure is an `error` event that does not end the stream."""
    mapper = _Mapper(run, max_iterations)
    for seq in range(start, len(state.records)):
        record = state.records[seq]
        if seq > start and record["t"] == RecordType.TURN:
            return  # the next turn
        for index, (name, data) in enumerate(mapper.map(seq, record)):
            if name == "subagent_error":
                name = "error"
                data = {**data, "fatal": False}
            yield HarnessEvent(seq, index, name, {"type": name, **{k: v for k, v in data.items() if v is not None}})
