"""The lossless transcript of a run, kept in ConfigMaps the resource owns.

Status must stay small, but a restarted operator needs every message to resume, and the API
must be able to return the whole conversation. So every message, every tool-call intent and
every decision acted upon is appended to ConfigMaps named `<owner>-transcript-<uid>-<n>`, owned by the
Investigation (garbage-collected with it), labelled with the owner's uid, each kept under
`chunk_limit` bytes. A chunk is only ever extended, never rewritten; a new chunk starts when the
current one is full.

Keys (all values are JSON, ASCII-only so the byte size is the string length):

- `m-000042`: raw message 42 (an OpenAI chat message dict), numbered in append order.
  A message too big for one chunk is stored as parts `m-000042.000`, `m-000042.001`, ...,
  possibly in consecutive chunks; the parts' strings concatenate to the JSON.
- `s-<key>`: `{"id": call_id}` — the tool call is about to run. Written *before* the tool runs,
  so a restart knows which calls may have had effects and must never run again.
- `d-<key>`: `{"id", "approved", "reason"}` — a person's decision the run acted upon.
- `c-000003`: `{"at": 57, "messages": [...]}` — the engine compacted its working history at
  raw message 57; the working history is `messages` followed by raw messages from 57 on.
  Large compaction records are split into parts like messages.

Every write is one merge patch (or create) whose keys are deterministic, so retrying a write
is harmless, and writes are strictly ordered, so what is stored is always a prefix of what
was appended: a crash loses at most the unsynced tail, never a record in the middle.

Writes are pipelined: `append_*` only buffers, `flush_soon()` starts writing in the background
(overlapping the next model call), and `sync()` waits until everything appended so far is
stored — the operator calls it before a tool runs and before any milestone in status.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .kube import Kube, is_conflict

__all__ = [
    "DEFAULT_CHUNK_LIMIT",
    "TRANSCRIPT_LABEL",
    "TranscriptState",
    "Transcript",
    "decode_chunks",
    "chunk_name",
]

DEFAULT_CHUNK_LIMIT = 512 * 1024
TRANSCRIPT_LABEL = "lestrade.dev/transcript-of"
CHUNK_LABEL = "lestrade.dev/transcript-chunk"

_KEY_SAFE = re.compile(r"^[-._a-zA-Z0-9]{1,200}$")
_MESSAGE_KEY = re.compile(r"^([mc])-(\d{6,})(?:\.(\d{3,}))?$")


def _id_key(prefix: str, call_id: str) -> str:
    """A ConfigMap-safe key for a tool call id (ids are model-chosen strings)."""
    if _KEY_SAFE.match(call_id):
        return f"{prefix}-{call_id}"
    return f"{prefix}-h{hashlib.sha256(call_id.encode()).hexdigest()[:32]}"


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
    """What a transcript holds, decoded."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    """Every raw message, in order."""
    started: set[str] = field(default_factory=set)
    """Tool call ids whose execution was about to start (intent recorded)."""
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Decisions the run acted upon: call id -> {approved, reason}."""
    compactions: list[dict[str, Any]] = field(default_factory=list)
    """Compaction records ({at, messages}) in order."""

    def working_messages(self) -> list[dict[str, Any]]:
        """The history the engine continues from: the last compaction plus what followed."""
        if not self.compactions:
            return list(self.messages)
        last = self.compactions[-1]
        return list(last["messages"]) + self.messages[int(last["at"]) :]


def decode_chunks(chunks: Iterable[Mapping[str, str]]) -> TranscriptState:
    """Decodes the `data` maps of a transcript's chunks (in chunk order) into its records."""
    parts: dict[tuple[str, int], dict[int, str]] = {}
    state = TranscriptState()
    for data in chunks:
        for key, value in data.items():
            match = _MESSAGE_KEY.match(key)
            if match:
                kind, number, part = match.group(1), int(match.group(2)), match.group(3)
                parts.setdefault((kind, number), {})[int(part) if part else 0] = value
            elif key.startswith("s-"):
                state.started.add(json.loads(value)["id"])
            elif key.startswith("d-"):
                record = json.loads(value)
                state.decisions[record.pop("id")] = record
    for kind in ("m", "c"):
        numbers = sorted(n for k, n in parts if k == kind)
        # Only a gap-free prefix counts; a tail with a missing part was never completely stored.
        for expected, number in enumerate(numbers):
            if number != expected:
                break
            pieces = parts[(kind, number)]
            if sorted(pieces) != list(range(len(pieces))):
                break
            try:
                record = json.loads("".join(pieces[i] for i in range(len(pieces))))
            except json.JSONDecodeError:
                break
            (state.messages if kind == "m" else state.compactions).append(record)
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
    ) -> None:
        """`owner` is {apiVersion, kind, name, uid} of the owning resource."""
        self._kube = kube
        self._namespace = namespace
        self._owner = dict(owner)
        self._limit = max(chunk_limit, 4096)
        self._part_size = self._limit - 1024
        self.state = TranscriptState()
        self.chunks: list[str] = []
        self._chunk_bytes = 0
        self._chunk_exists = False
        self._pending: list[tuple[str, str]] = []
        self._lock = asyncio.Lock()
        self._background: asyncio.Task[None] | None = None
        self._stored_messages = 0

    # -- reading -------------------------------------------------------------------------------

    @property
    def _base(self) -> str:
        return f"/api/v1/namespaces/{self._namespace}/configmaps"

    async def load(self) -> TranscriptState:
        """Reads every chunk of the owner's transcript (empty state when there is none)."""
        found = await self._kube.get(
            self._base, labelSelector=f"{TRANSCRIPT_LABEL}={self._owner['uid']}"
        )
        items = sorted(
            found.get("items", []),
            key=lambda cm: int(cm["metadata"].get("labels", {}).get(CHUNK_LABEL, "0")),
        )
        datas = [cm.get("data") or {} for cm in items]
        self.state = decode_chunks(datas)
        self.chunks = [cm["metadata"]["name"] for cm in items]
        self._stored_messages = len(self.state.messages)
        if datas:
            self._chunk_bytes = sum(len(k) + len(v) for k, v in datas[-1].items())
            self._chunk_exists = True
        return self.state

    @property
    def stored_messages(self) -> int:
        """Messages known to be stored (what status.transcript may claim)."""
        return self._stored_messages

    def reference(self) -> dict[str, Any]:
        """The value of status.transcript."""
        return {"kind": "ConfigMap", "names": list(self.chunks), "messages": self._stored_messages}

    # -- appending -----------------------------------------------------------------------------

    def append_message(self, message: dict[str, Any]) -> None:
        index = len(self.state.messages)
        self.state.messages.append(message)
        self._pending.extend(self._parts(f"m-{index:06d}", _dumps(message)))

    def append_started(self, call_id: str) -> None:
        if call_id in self.state.started:
            return
        self.state.started.add(call_id)
        self._pending.append((_id_key("s", call_id), _dumps({"id": call_id})))

    def append_decision(self, call_id: str, approved: bool, reason: str | None) -> None:
        record = {"approved": approved, "reason": reason}
        self.state.decisions[call_id] = record
        self._pending.append((_id_key("d", call_id), _dumps({"id": call_id, **record})))

    def append_compaction(self, messages: list[dict[str, Any]]) -> None:
        index = len(self.state.compactions)
        record = {"at": len(self.state.messages), "messages": messages}
        self.state.compactions.append(record)
        self._pending.extend(self._parts(f"c-{index:06d}", _dumps(record)))

    def _parts(self, key: str, value: str) -> list[tuple[str, str]]:
        if len(key) + len(value) <= self._part_size:
            return [(key, value)]
        size = self._part_size - len(key) - 4
        return [
            (f"{key}.{i:03d}", value[start : start + size])
            for i, start in enumerate(range(0, len(value), size))
        ]

    # -- writing -------------------------------------------------------------------------------

    def flush_soon(self) -> None:
        """Starts storing what was appended, without waiting (overlaps the caller's next step)."""
        if self._pending and (self._background is None or self._background.done()):
            self._background = asyncio.create_task(self._flush(), name="transcript flush")

    async def sync(self) -> None:
        """Returns once everything appended so far is stored."""
        if self._background is not None:
            background, self._background = self._background, None
            await background
        await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            while self._pending:
                entries, self._pending = self._pending, []
                messages_after = len(self.state.messages)
                await self._write(entries)
                self._stored_messages = max(self._stored_messages, messages_after)

    async def _write(self, entries: list[tuple[str, str]]) -> None:
        batch: dict[str, str] = {}
        batch_bytes = 0
        for key, value in entries:
            cost = len(key) + len(value)
            if self._chunk_bytes + batch_bytes + cost > self._limit and (
                batch or self._chunk_bytes
            ):
                await self._commit(batch)
                self._chunk_exists, self._chunk_bytes = False, 0
                batch, batch_bytes = {}, 0
            batch[key] = value
            batch_bytes += cost
        await self._commit(batch)

    async def _commit(self, batch: dict[str, str]) -> None:
        if not batch:
            return
        size = sum(len(k) + len(v) for k, v in batch.items())
        if self._chunk_exists:
            await self._kube.patch(f"{self._base}/{self.chunks[-1]}", {"data": batch}, parse=False)
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
                await self._kube.create(self._base, body, parse=False)
            except Exception as exc:
                if not is_conflict(exc):
                    raise
                # A retried create whose first attempt went through, or a chunk left by an
                # earlier process: extending it with the same keys is harmless.
                await self._kube.patch(f"{self._base}/{name}", {"data": batch}, parse=False)
            self.chunks.append(name)
            self._chunk_exists = True
        self._chunk_bytes += size
