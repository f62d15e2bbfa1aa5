"""The lossless transcript of a run: an append-only log of records in ConfigMaps the resource owns.

Status must stay small, but a restarted operator needs every message to resume, and the API
must be able to return (and stream) the whole conversation. So everything a run does is
appended as a *record* to ConfigMaps named `<owner>-transcript-<uid>-<n>`, owned by the
Investigation or Conversation (garbage-collected with it), labelled with the owner's uid, each
kept under `chunk_limit` bytes. A chunk is only ever extended, never rewritten; a new chunk
starts when the current one is full.

Record `n` is stored under the key `r-<n, 7 digits>` (a record too big for one chunk is split
into parts `r-0000042.000`, `r-0000042.001`, ... whose strings concatenate to the JSON). Every
record is a JSON object whose `t` says what it is (`RecordType`; each type's shape is a `TypedDict`
in `lestrade.runs.records`, and records are written and read through those); its number is its `seq`, so
the records *are* the progress sequence a client streams (`lestrade.runs.progress`):
ordered, gap-free, and the same for every reader.

- `message`: `{"message": {...}}` — an OpenAI chat message added to the conversation.
- `tool_started`: `{"id", "digest", "intent": true, "readOnly"?}` — the call is about to run
  (its intent). The intents of all calls of a model turn are stored in one write before any of
  them runs. `digest` is the `sha256:` digest of the call's tool name and exact arguments (also
  in the records below); `readOnly`: the tool declared the call read-only. A record without
  `intent` (older transcripts, harness subagents) also counts as `tool_launched`.
- `tool_launched`: `{"id", "digest"}` — a call that may have an effect launches now. Stored
  right before it launches, so a restart knows which calls may have had effects and must never
  run again ("outcome unknown"); a call with an intent but no `tool_launched` never ran, and
  runs after the restart. Read-only calls get no such record: they are run again.
- `tool_result`: `{"id", "name", "status", "description", "digest"}` — how a call ended (its
  output is the tool message that follows).
- `approval_needed`: `{"pending": [{toolCallId, toolName, description, params, digest,
  frontend?}]}` (`frontend: true`: a call of a pause-mode frontend tool, which the client runs).
- `decision`: `{"id", "approved", "reason", "digest"}` — a person's decision the run acted
  upon, bound to the digest of the call that waited for it.
- `tokens`: `{"promptTokens", "completionTokens", "totalTokens", "cost"}` of one model call,
  with the window then (`breakdown` by role, `maxTokens`, `maxOutputTokens`, `truncations`).
- `compaction`: `{"at", "messages", "tokensBefore", "tokensAfter"}` — the working history
  became `messages` followed by the raw messages from number `at` on.
- `turn`: `{"index"}` — a Conversation turn starts (its user message follows).
- `answer`: `{"text", "sections"?}` — the run (or turn) answered.
- `error`: `{"reason", "message"}` — the run (or turn) failed.

Every write is one merge patch (or create) whose keys are deterministic, and writes are strictly
ordered, so what is stored is always a prefix of what was appended: a crash loses at most the
unsynced tail, never a record in the middle. What fits one chunk is written in one write, so
records appended together (a turn's intents) are stored all or none.

Writes are fenced: each carries the resourceVersion of the chunk as this writer last read or
wrote it (a new chunk is a create, which fails when it exists; a full chunk is first sealed with
a conditional write, as the context store does), so a second writer of the same transcript — a
replica that was fenced but still runs, a stale owner, a context-store append racing a turn's
first write — cannot interleave its records with this one's: whoever writes second gets
`TranscriptFenced` and stops (a retried write of our own that did land is recognized and kept).

Writes are pipelined: `append_*` only buffers, `flush_soon()` starts writing in the background
(overlapping the next model call; with a delay, what is appended meanwhile rides along), and
`sync()` waits until everything appended so far is stored — the operator calls it before a
call that may have an effect runs and before any milestone in status.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lestrade.kube import Kube, api_path, is_conflict, is_not_found
from lestrade.resources.keys import TRANSCRIPT_AUTHOR_ANNOTATION, TRANSCRIPT_LABEL
from lestrade.resources.keys import TRANSCRIPT_CHUNK_LABEL as CHUNK_LABEL
from lestrade.runs.records import (
    CompactionRecord,
    DecisionRecord,
    MessageRecord,
    Record,
    RecordType,
    ToolLaunchedRecord,
    ToolStartedRecord,
)

__all__ = [
    "TranscriptFenced",
    "SEAL_KEY",
    "DEFAULT_CHUNK_LIMIT",
    "TRANSCRIPT_LABEL",
    "CHUNK_LABEL",
    "RecordType",
    "Record",
    "TranscriptState",
    "Transcript",
    "decode_chunks",
    "chunk_name",
    "owned_chunks",
]

DEFAULT_CHUNK_LIMIT = 512 * 1024

_RECORD_KEY = re.compile(r"^r-(\d{7,})(?:\.(\d{3,}))?$")
_RESOURCE_VERSION = re.compile(rb'"resourceVersion":"([^"]+)"')

SEAL_KEY = "sealed"
"""In a transcript chunk no more records go to (not a record key: readers skip it)."""


class TranscriptFenced(Exception):
    """Another writer extended the transcript since this one read it: this writer must stop
    (and whoever resumes reads the transcript again)."""


def _resource_version(raw: bytes) -> str | None:
    """metadata.resourceVersion of a ConfigMap answer, without decoding its (large) data:
    the apiserver writes metadata first, and nothing before it holds that key."""
    match = _RESOURCE_VERSION.search(raw, 0, 8192)
    return match.group(1).decode() if match else None


def _is_opening(value: str) -> bool:
    """A stored record (or part) that is a run's opening system or user message."""
    try:
        record = json.loads(value)
    except ValueError:
        return False
    return (
        isinstance(record, dict)
        and record.get("t") == RecordType.MESSAGE
        and (record.get("message") or {}).get("role") in ("system", "user")
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def chunk_name(owner_name: str, owner_uid: str, index: int) -> str:
    """`<owner>-transcript-<uid prefix>-<n>`, shortened with a hash to stay a valid name.

    The uid prefix keeps a re-created resource of the same name from colliding with chunks of
    its predecessor that the garbage collector has not removed yet.
    """
    suffix = f"-transcript-{owner_uid[:8]}-{index}"
    if len(owner_name) + len(suffix) > 253:
        digest = hashlib.sha256(owner_name.encode()).hexdigest()[:10]
        owner_name = f"{owner_name[: 253 - len(suffix) - 11]}-{digest}"
    return owner_name + suffix


@dataclass
class TranscriptState:
    """What a transcript holds: the records in order, and the views a run needs of them."""

    records: list[Record] = field(default_factory=list)
    """Every record in order; `records[n]` has seq n."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Every raw message, in order."""
    message_seqs: list[int] = field(default_factory=list)
    """The seq of each raw message's record."""
    started: set[str] = field(default_factory=set)
    """Tool call ids whose execution was about to start (intent recorded)."""
    launched: set[str] = field(default_factory=set)
    """Tool call ids that may have launched (and had an effect): never run again."""
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Decisions the run acted upon: call id -> {approved, reason, digest}."""
    compactions: list[CompactionRecord] = field(default_factory=list)
    """Compaction records in order."""
    turns: dict[int, int] = field(default_factory=dict)
    """Conversation turn index -> seq of its `turn` record."""

    def apply(self, record: Record) -> None:
        """Adds one record (in order) and updates the views."""
        seq = len(self.records)
        self.records.append(record)
        if record["t"] == RecordType.MESSAGE:
            if record.get("agentId"):
                return  # a subagent's own history (harness sessions), not the conversation's
            self.messages.append(record["message"])
            self.message_seqs.append(seq)
        elif record["t"] == RecordType.TOOL_STARTED:
            self.started.add(record["id"])
            if not record.get("intent"):
                self.launched.add(record["id"])
        elif record["t"] == RecordType.TOOL_LAUNCHED:
            self.launched.add(record["id"])
        elif record["t"] == RecordType.DECISION:
            self.decisions[record["id"]] = {
                "approved": bool(record["approved"]),
                "reason": record.get("reason"),
                "digest": record.get("digest"),
            }
        elif record["t"] == RecordType.COMPACTION:
            self.compactions.append(record)
        elif record["t"] == RecordType.TURN:
            self.turns.setdefault(int(record["index"]), seq)

    def pending_digests(self) -> dict[str, str]:
        """Call id -> digest of the calls the last `approval_needed` record asked about."""
        for record in reversed(self.records):
            if record["t"] == RecordType.APPROVAL_NEEDED:
                return {p["toolCallId"]: str(p.get("digest") or "") for p in record.get("pending") or []}
        return {}

    @property
    def version(self) -> int:
        """Messages plus compactions: what `status.version` of a Conversation counts."""
        return len(self.messages) + len(self.compactions)

    def working_messages(self) -> list[dict[str, Any]]:
        """The history the engine continues from: the last compaction plus what followed."""
        if not self.compactions:
            return list(self.messages)
        last = self.compactions[-1]
        return list(last["messages"]) + self.messages[int(last["at"]) :]

    def since(self, seq: int) -> list[Record]:
        """The records from `seq` on."""
        return self.records[seq:]


def owned_chunks(items: Iterable[Mapping[str, Any]], requester: str | None) -> list[Mapping[str, Any]]:
    """The chunks (ConfigMaps listed by the owner's uid label) that are this run's history, in
    order: Lestrade's own (no author annotation), and those whose author is the run's creator
    `requester`. A chunk someone else wrote — the transcript admission policy makes them sign
    it with their own name — is not part of anybody's history; nor is one without a numeric
    chunk index."""
    kept: list[tuple[int, Mapping[str, Any]]] = []
    for cm in items:
        meta = cm.get("metadata") or {}
        author = (meta.get("annotations") or {}).get(TRANSCRIPT_AUTHOR_ANNOTATION)
        if author is not None and (not requester or author != requester):
            continue
        index = str((meta.get("labels") or {}).get(CHUNK_LABEL, ""))
        if index.isdigit():
            kept.append((int(index), cm))
    return [cm for _, cm in sorted(kept, key=lambda pair: pair[0])]


def decode_chunks(chunks: Iterable[Mapping[str, str]]) -> TranscriptState:
    """Decodes the `data` maps of a transcript's chunks (in chunk order) into its records."""
    parts: dict[int, dict[int, str]] = {}
    for data in chunks:
        for key, value in data.items():
            match = _RECORD_KEY.match(key)
            if match:
                number, part = int(match.group(1)), match.group(2)
                parts.setdefault(number, {})[int(part) if part else 0] = value
    state = TranscriptState()
    # Only a gap-free prefix counts; a tail with a missing part was never completely stored.
    for expected, number in enumerate(sorted(parts)):
        if number != expected:
            break
        pieces = parts[number]
        if sorted(pieces) != list(range(len(pieces))):
            break
        try:
            record = json.loads("".join(pieces[i] for i in range(len(pieces))))
        except json.JSONDecodeError:
            break
        if not isinstance(record, dict) or not isinstance(record.get("t"), str):
            break  # not a record: nothing after it counts either
        state.apply(cast(Record, record))
    return state


class Transcript:
    """Appends records to one resource's transcript chunks; see the module docstring."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        owner: Mapping[str, str],
        *,
        chunk_limit: int = DEFAULT_CHUNK_LIMIT,
        requester: str | None = None,
    ) -> None:
        """`owner` is {apiVersion, kind, name, uid} of the owning resource, `requester` its
        creator (`ObjectRef.requester`): chunks another user wrote are not read."""
        self._kube = kube
        self._requester = requester
        self._namespace = namespace
        self._owner = dict(owner)
        self._limit = max(chunk_limit, 4096)
        self._part_size = self._limit - 1024
        self.state = TranscriptState()
        self.chunks: list[str] = []
        self._chunk_bytes = 0
        self._chunk_exists = False
        self._chunk_version: str | None = None
        """resourceVersion of the last chunk as last read or written (the write precondition)."""
        self._may_overwrite = True
        """Until its first write, a writer that never loaded the transcript (a fresh run) may
        write its opening records over those of an earlier attempt that stored nothing else."""
        self._pending: list[tuple[str, str]] = []
        self._lock = asyncio.Lock()
        self._background: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        """A delayed `flush_soon` not started yet."""
        self._stored_messages = 0
        self.stored_records = 0
        """Records known to be stored."""
        self.before_write: Callable[[], Awaitable[None]] | None = None
        """Awaited before each write, delayed ones included (the operator's Conversation turn:
        until its Running status is stored)."""
        self.after_write: Callable[[], None] | None = None
        """Called after each write (the operator's run: status.transcript follows, so that
        whoever reads the transcript when the run changes reads the delayed writes too)."""

    # -- reading -------------------------------------------------------------------------------

    @property
    def _base(self) -> str:
        return api_path("v1", "configmaps", self._namespace)

    async def load(self) -> TranscriptState:
        """Reads every chunk of the owner's transcript (empty state when there is none)."""
        found = await self._kube.get(self._base, labelSelector=f"{TRANSCRIPT_LABEL}={self._owner['uid']}")
        items = owned_chunks(found.get("items", []), self._requester)
        datas = [cm.get("data") or {} for cm in items]
        self.state = decode_chunks(datas)
        self.chunks = [cm["metadata"]["name"] for cm in items]
        self._stored_messages = len(self.state.messages)
        self.stored_records = len(self.state.records)
        self._may_overwrite = False
        if datas:
            self._chunk_bytes = sum(len(k) + len(v) for k, v in datas[-1].items())
            self._chunk_version = items[-1]["metadata"].get("resourceVersion")
            # A sealed chunk takes no more records (its sealer may have died before the next).
            self._chunk_exists = SEAL_KEY not in datas[-1]
            if not self._chunk_exists:
                self._chunk_bytes = 0
        return self.state

    async def load_if_written(self) -> TranscriptState:
        """`load()` for a run whose status does not say it started: its first chunk is read (one
        GET, mostly a 404), and the whole transcript only when that exists. A run's Running
        status may ride with a status write after the transcript's first one, so a run that
        stopped in between has records its next attempt must continue from. Read from the
        apiserver's cache (`resourceVersion=0`, no etcd read): a chunk it has not seen yet, if
        ever, makes this attempt's first write conflict and stop (fenced), and the next one
        reads again."""
        try:
            name = chunk_name(self._owner["name"], self._owner["uid"], 0)
            await self._kube.get(f"{self._base}/{name}", resourceVersion="0")
        except Exception as exc:
            if not is_not_found(exc):
                raise
            return self.state
        return await self.load()

    @property
    def stored_messages(self) -> int:
        """Messages known to be stored (what status.transcript may claim)."""
        return self._stored_messages

    def reference(self) -> dict[str, Any]:
        """The value of status.transcript."""
        return {
            "kind": "ConfigMap",
            "names": list(self.chunks),
            "messages": self._stored_messages,
            "records": self.stored_records,
        }

    # -- appending -----------------------------------------------------------------------------

    def append(self, record: Record) -> int:
        """Buffers one record; returns its seq."""
        seq = len(self.state.records)
        self.state.apply(record)
        self._pending.extend(self._parts(f"r-{seq:07d}", _dumps(record)))
        return seq

    def append_message(self, message: dict[str, Any]) -> int:
        return self.append(MessageRecord(t=RecordType.MESSAGE, message=message))

    def append_started(self, call_id: str, digest: str = "", *, read_only: bool = False) -> None:
        """The intent to run a call (stored before it runs; see `append_launched`)."""
        if call_id not in self.state.started:
            record = ToolStartedRecord(t=RecordType.TOOL_STARTED, id=call_id, digest=digest, intent=True)
            if read_only:
                record["readOnly"] = True
            self.append(record)

    def append_launched(self, call_id: str, digest: str = "") -> None:
        """A call that may have an effect launches now (store it before the call runs)."""
        if call_id not in self.state.launched:
            self.append(ToolLaunchedRecord(t=RecordType.TOOL_LAUNCHED, id=call_id, digest=digest))

    def append_decision(self, call_id: str, approved: bool, reason: str | None, digest: str | None = None) -> None:
        if call_id not in self.state.decisions:
            self.append(
                DecisionRecord(t=RecordType.DECISION, id=call_id, approved=approved, reason=reason, digest=digest)
            )

    def append_compaction(self, messages: list[dict[str, Any]], tokens_before: int = 0, tokens_after: int = 0) -> None:
        self.append(
            CompactionRecord(
                t=RecordType.COMPACTION,
                at=len(self.state.messages),
                messages=messages,
                tokensBefore=tokens_before,
                tokensAfter=tokens_after,
            )
        )

    def _parts(self, key: str, value: str) -> list[tuple[str, str]]:
        if len(key) + len(value) <= self._part_size:
            return [(key, value)]
        size = self._part_size - len(key) - 4
        return [(f"{key}.{i:03d}", value[start : start + size]) for i, start in enumerate(range(0, len(value), size))]

    # -- writing -------------------------------------------------------------------------------

    def flush_soon(self, delay: float = 0.0) -> None:
        """Starts storing what was appended, without waiting (overlaps the caller's next step).

        With a `delay`, the write starts only that many seconds later, so that what is appended
        meanwhile (the results of a turn's read-only calls, then the next model turn and its
        intents) goes to the apiserver in the same write: each write is a ConfigMap update the
        apiserver and every watcher of ConfigMaps pay for. `sync()` does not wait for the delay.
        """
        if not self._pending:
            return
        if delay > 0:
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(delay, self._start_flush)
            return
        self._start_flush()

    def _start_flush(self) -> None:
        self.close()  # a delayed flush, if any, is this one
        if self._pending and (self._background is None or self._background.done()):
            self._background = asyncio.create_task(self._flush(), name="transcript flush")

    def close(self) -> None:
        """Drops a delayed write that has not started (what is unsent stays unsent): a writer
        that stopped, or lost its run, must not write later."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def sync(self) -> None:
        """Returns once everything appended so far is stored."""
        self.close()  # written now, not after the delay
        if self._background is not None:
            background, self._background = self._background, None
            await background
        await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            while self._pending:
                if self.before_write is not None:
                    await self.before_write()
                entries, self._pending = self._pending, []
                messages_after = len(self.state.messages)
                records_after = len(self.state.records)
                await self._write(entries)
                self._stored_messages = max(self._stored_messages, messages_after)
                self.stored_records = max(self.stored_records, records_after)
                if self.after_write is not None:
                    self.after_write()

    async def _write(self, entries: list[tuple[str, str]]) -> None:
        batch: dict[str, str] = {}
        batch_bytes = 0
        total = sum(len(k) + len(v) for k, v in entries)
        if self._chunk_bytes and self._chunk_bytes + total > self._limit and total <= self._limit:
            # What fits in one chunk is stored in one write (a fresh chunk): records appended
            # together, such as a turn's intents, are then stored all or none.
            await self._seal()
        for key, value in entries:
            cost = len(key) + len(value)
            if self._chunk_bytes + batch_bytes + cost > self._limit and (batch or self._chunk_bytes):
                await self._commit(batch)
                await self._seal()
                batch, batch_bytes = {}, 0
            batch[key] = value
            batch_bytes += cost
        await self._commit(batch)

    async def _seal(self) -> None:
        """Closes the last chunk to further records (conditionally, like every write), so the
        next ones go to a new chunk and a writer still holding the old one's version fails."""
        if self._chunk_exists and self.chunks:
            await self._patch(self.chunks[-1], {SEAL_KEY: "true"})
        self._chunk_exists, self._chunk_bytes = False, 0

    async def _patch(self, name: str, data: dict[str, str], tries: int = 3) -> None:
        """A merge patch of the chunk's data on the condition that nobody else wrote it since."""
        body: dict[str, Any] = {"data": data}
        if self._chunk_version is not None:
            body["metadata"] = {"resourceVersion": self._chunk_version}
        try:
            self._chunk_version = await self._kube.patch(f"{self._base}/{name}", body, parse=_resource_version)
        except Exception as exc:
            if not is_conflict(exc):
                raise
            await self._recover(name, data, exc, tries - 1)
        self._may_overwrite = False

    async def _recover(self, name: str, data: dict[str, str], exc: Exception, tries: int = 3) -> None:
        """A conditional write conflicted: fine if what it wrote is there (a retry of our own
        write that had landed), or if the chunk holds nothing beyond what we know is stored
        and a fresh run's opening records (written again, as a run that never read its
        transcript may); anything else is another writer's: fenced."""
        current = await self._kube.get(f"{self._base}/{name}")
        stored = current.get("data") or {}
        if all(stored.get(k) == v for k, v in data.items()):
            self._chunk_version = current["metadata"].get("resourceVersion")
            return
        ours = max((self._record_number(k) for k in data), default=-1)
        foreign = [
            k
            for k, v in stored.items()
            if data.get(k) != v and (k == SEAL_KEY or self._record_number(k) >= self.stored_records)
        ]
        beyond = [k for k in foreign if k == SEAL_KEY or self._record_number(k) > ours]
        opening = all(_is_opening(stored[k]) for k in foreign)
        if (foreign and not (self._may_overwrite and opening)) or beyond or tries <= 0:
            raise TranscriptFenced(
                f"transcript chunk {name} was written by someone else ({len(foreign)} record(s) "
                "this writer did not store): another replica or writer owns this run now"
            ) from exc
        self._chunk_version = current["metadata"].get("resourceVersion")
        await self._patch(name, data, tries)

    @staticmethod
    def _record_number(key: str) -> int:
        match = _RECORD_KEY.match(key)
        return int(match.group(1)) if match else -1

    async def _commit(self, batch: dict[str, str]) -> None:
        if not batch:
            return
        size = sum(len(k) + len(v) for k, v in batch.items())
        if self._chunk_exists:
            await self._patch(self.chunks[-1], batch)
        else:
            index = len(self.chunks)
            name = chunk_name(self._owner["name"], self._owner["uid"], index)
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": self._namespace,
                    "labels": {TRANSCRIPT_LABEL: self._owner["uid"], CHUNK_LABEL: str(index)},
                    "ownerReferences": [
                        {
                            "apiVersion": self._owner["apiVersion"],
                            "kind": self._owner["kind"],
                            "name": self._owner["name"],
                            "uid": self._owner["uid"],
                            "controller": True,
                            "blockOwnerDeletion": False,
                        }
                    ],
                },
                "data": batch,
            }
            try:
                self._chunk_version = await self._kube.create(self._base, body, parse=_resource_version)
            except Exception as exc:
                if not is_conflict(exc):
                    raise
                # A retried create whose first attempt went through, a fresh run's opening
                # records left by an earlier process, or another writer's chunk (fenced).
                await self._recover(name, batch, exc)
            self._may_overwrite = False
            self.chunks.append(name)
            self._chunk_exists = True
        self._chunk_bytes += size
