"""What a run has done, derived from its transcript alone: progress records and status fields.

The transcript (`lestrade.runs.transcript`) is the source of truth; status is a projection
of it. Deriving the status fields here — tool calls with their outcome, counts, steps, usage,
the calls waiting for approval — rather than carrying counters from one status write to the
next means a run resumed after a crash, and a settled resource, always say exactly what the
transcript says. The same records, numbered, are the progress sequence that the API streams:
any process can rebuild a stream from any sequence number.

Both the operator and the API import this module; it reads, never writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lestrade.resources.common import PendingApproval, ToolCall, Usage
from lestrade.runs.records import PendingCall, Record, ToolResultRecord
from lestrade.runs.transcript import RecordType, TranscriptState

__all__ = [
    "ProgressRecord",
    "progress_records",
    "RunFacts",
    "run_facts",
    "model_steps",
    "MAX_STATUS_TOOL_CALLS",
    "MAX_PARAM_CHARS",
    "call_arguments",
]

MAX_STATUS_TOOL_CALLS = 50
"""Tool calls listed in status (the newest); the transcript has all of them."""
MAX_PARAM_CHARS = 2048


@dataclass(frozen=True)
class ProgressRecord:
    """One step of progress: `seq` numbers every record of the transcript without gaps."""

    seq: int
    type: str
    data: dict[str, Any]


def progress_records(state: TranscriptState, after: int = -1) -> list[ProgressRecord]:
    """The records with seq > `after`, in order."""
    return [
        ProgressRecord(seq, record["t"], {k: v for k, v in record.items() if k != "t"})
        for seq, record in enumerate(state.records)
        if seq > after
    ]


def short_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as status shows them: whole when small, else a truncated JSON rendering."""
    text = json.dumps(params, default=str)
    if len(text) <= MAX_PARAM_CHARS:
        return dict(params)
    return {"truncated": text[:MAX_PARAM_CHARS]}


def call_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's `arguments` (a JSON string from the model) as a dict, whatever was sent."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return {"arguments": str(raw)}
    return value if isinstance(value, dict) else {"arguments": value}


@dataclass(frozen=True)
class RunFacts:
    """The status fields of one run (an Investigation, or one Conversation turn)."""

    steps: int
    tool_call_count: int
    tool_calls: list[ToolCall]
    usage: Usage
    pending_approvals: list[PendingApproval]


def model_steps(records: Sequence[Record]) -> int:
    """Model turns among `records`: `run_facts(...).steps` alone, without the rest of the facts
    (each call's summary, the usage), for a progress message written on every model turn."""
    return sum(1 for r in records if r["t"] == RecordType.MESSAGE and r["message"].get("role") == "assistant")


def run_facts(state: TranscriptState, since: int = 0, until: int | None = None, *, settled: bool = False) -> RunFacts:
    """The facts of the records [since, until) (a Conversation turn starts at its `turn` record
    and ends where the next one starts). `settled`: the run is over, so a call without a result
    never got one."""
    steps = 0
    calls: dict[str, ToolCall] = {}
    results: dict[str, ToolResultRecord] = {}
    started: set[str] = set()
    decided: set[str] = set()
    approval: list[PendingCall] = []
    digests: dict[str, str] = {}
    usage = Usage()
    for record in state.records[since:until]:
        if record["t"] == RecordType.MESSAGE:
            message = record["message"]
            if message.get("role") != "assistant":
                continue
            steps += 1
            for part in message.get("tool_calls") or []:
                fn = part.get("function") or {}
                calls.setdefault(
                    part.get("id") or f"call-{len(calls)}",
                    ToolCall(
                        id=part.get("id") or f"call-{len(calls)}",
                        name=str(fn.get("name") or "?"),
                        params=short_params(call_arguments(fn.get("arguments"))),
                    ),
                )
        elif record["t"] == RecordType.TOOL_STARTED:
            started.add(record["id"])
            digests[record["id"]] = str(record.get("digest") or "")
        elif record["t"] == RecordType.TOOL_RESULT:
            results[record["id"]] = record
            digests[record["id"]] = str(record.get("digest") or digests.get(record["id"], ""))
        elif record["t"] == RecordType.DECISION:
            decided.add(record["id"])
        elif record["t"] == RecordType.APPROVAL_NEEDED:
            approval = list(record.get("pending") or [])
            digests.update({p["toolCallId"]: str(p.get("digest") or "") for p in approval})
        elif record["t"] == RecordType.TOKENS:
            usage = Usage(
                prompt_tokens=usage.prompt_tokens + int(record.get("promptTokens") or 0),
                completion_tokens=usage.completion_tokens + int(record.get("completionTokens") or 0),
                total_tokens=usage.total_tokens + int(record.get("totalTokens") or 0),
                cached_tokens=usage.cached_tokens + int(record.get("cachedTokens") or 0),
                cost=round(usage.cost + float(record.get("cost") or 0.0), 8),
            )
    waiting = {p["toolCallId"]: p for p in approval if p["toolCallId"] not in decided}
    listed: list[ToolCall] = []
    for call_id, call in calls.items():
        result = results.get(call_id)
        if result is not None:
            status, description = str(result.get("status")), str(result.get("description") or "")
        elif call_id in waiting and not settled:
            status, description = "approval_required", str(waiting[call_id].get("description") or "")
        elif settled:
            status, description = "error", ""
        else:
            status, description = "running", ""
        listed.append(
            call.model_copy(update={"status": status, "description": description, "digest": digests.get(call_id, "")})
        )
    pending = (
        []
        if settled
        else [
            PendingApproval(
                tool_call_id=p["toolCallId"],
                tool_name=p.get("toolName") or "",
                description=p.get("description") or "",
                params=short_params(p.get("params") or {}),
                digest=str(p.get("digest") or ""),
            )
            for p in waiting.values()
            if p["toolCallId"] not in results
        ]
    )
    return RunFacts(
        steps=steps,
        tool_call_count=len(started),
        tool_calls=listed[-MAX_STATUS_TOOL_CALLS:],
        usage=usage,
        pending_approvals=pending,
    )
