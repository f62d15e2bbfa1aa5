"""The context store (reference 004) on Conversations: a context *is* a Conversation, its log
is the Conversation's transcript, its window is what the operator would give the model next.

- `PUT` creates the Conversation (or updates `spec.context`): `token_budget`, `trigger_ratio`,
  `policy` and `metadata` are `spec.context.{tokenBudget, triggerRatio, compaction, metadata}`.
- `DELETE` sets `spec.tombstoned` (the CRD keeps it set and refuses new turns afterwards).
- An appended message becomes a transcript `message` record (see `context_messages.py`). It
  is stored, not answered: only `spec.turns` asks the operator for anything.
- `version` is the transcript's messages plus compactions (`TranscriptState.version`), `seq`
  numbers the messages from 1 — so the log, `seq` and `version` are the same whether a message
  came through `/v1`, a chat endpoint or `kubectl` and a turn.

Several API processes may append to one context at once. Every write to a transcript chunk
carries the chunk's resourceVersion (optimistic concurrency on the ConfigMap; a new chunk is a
create, which fails when someone else created it): a writer that lost the race reads the
transcript again and retries with the next record number, so no append is lost or duplicated
and `if_version` is checked against what is really stored. Within one process appends to a
context are serialized first, so they do not race each other.

The operator writes the transcript without such preconditions while it answers a turn, so the
store refuses appends and compactions while a turn is pending or running (409 `conflict`).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lestrade.api.contexts.messages import MAX_MESSAGE_BYTES, estimate, parts_of, to_chat
from lestrade.context.tokens import count_messages
from lestrade.context.window import Window, plan_window, policy_of
from lestrade.kube import ApiException, Kube, api_path, is_conflict, is_not_found, resource_path
from lestrade.resources import API_VERSION, CONVERSATION_KIND, CONVERSATION_PLURAL
from lestrade.resources.conversation import ContextSettings
from lestrade.resources.keys import CONTEXT_LABEL, REQUESTED_BY_ANNOTATION
from lestrade.resources.keys import CONTEXT_UPDATED_ANNOTATION as UPDATED_ANNOTATION
from lestrade.resources.keys import CONTEXT_WRITE_ANNOTATION as WRITE_ANNOTATION
from lestrade.runs.records import CompactionRecord, MessageRecord
from lestrade.runs.transcript import (
    CHUNK_LABEL,
    DEFAULT_CHUNK_LIMIT,
    TRANSCRIPT_LABEL,
    RecordType,
    TranscriptState,
    chunk_name,
    decode_chunks,
    owned_chunks,
)
from lestrade.runs.views import ConversationView
from lestrade.timefmt import now_iso

__all__ = ["ContextError", "ContextStore", "Stored", "DEFAULT_BUDGET", "CONTEXT_LABEL"]

DEFAULT_BUDGET = 128_000
"""Budget of a context without `token_budget` (the operator uses the model's window then)."""


DECODED_CACHE_SIZE = 32
"""Decoded transcripts kept per process (shared read-only by the requests that read them)."""

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_WRITE_ATTEMPTS = 200


class ContextError(Exception):
    """An answer in the documented error shape: `{"error": code, "message": ...}`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}


def check_id(context_id: str) -> str:
    if not _NAME.match(context_id):
        raise ContextError(
            400,
            "invalid_payload",
            f"id {context_id!r}: a context id is a Conversation name: lowercase letters, digits "
            "and '-', starting and ending with a letter or digit, at most 63 characters",
        )
    return context_id


@dataclass
class Stored:
    """A context as read: the Conversation, its transcript, and the transcript's chunks."""

    obj: dict[str, Any]
    state: TranscriptState
    chunks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.obj.get("spec") or {})

    @property
    def settings(self) -> ContextSettings:
        return ContextSettings.model_validate(self.spec.get("context") or {})

    @property
    def tombstoned(self) -> bool:
        return bool(self.spec.get("tombstoned"))


class ContextStore:
    def __init__(self, kube: Kube, namespace: str, chunk_limit: int = DEFAULT_CHUNK_LIMIT) -> None:
        self.kube = kube
        self.namespace = namespace
        self.chunk_limit = chunk_limit
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._decoded: OrderedDict[str, tuple[tuple[tuple[str, str | None], ...], TranscriptState]] = OrderedDict()

    def _path(self, name: str = "") -> str:
        return resource_path(CONVERSATION_PLURAL, self.namespace, name)

    # -- reading ----------------------------------------------------------------------------------

    async def conversation(self, name: str) -> dict[str, Any]:
        try:
            return await self.kube.get(self._path(check_id(name)))
        except ApiException as exc:
            if is_not_found(exc):
                raise ContextError(404, "not_found", f"context {name!r} does not exist") from None
            raise

    async def read(self, name: str) -> Stored:
        obj = await self.conversation(name)
        # A chunk is labelled with the owner's uid; the list is one consistent snapshot.
        found = await self.kube.get(
            api_path("v1", "configmaps", self.namespace),
            labelSelector=f"{TRANSCRIPT_LABEL}={obj['metadata']['uid']}",
        )
        # Chunks another user wrote (signed with their name by admission) are nobody's history.
        requester = (obj["metadata"].get("annotations") or {}).get(REQUESTED_BY_ANNOTATION)
        chunks = [dict(cm) for cm in owned_chunks(found.get("items") or [], requester)]
        # Decoding is the costly part of a long log (about 35 ms per 1,000 records): a state is
        # decoded once per set of chunk versions and shared by the reads that follow.
        key = tuple((cm["metadata"]["name"], cm["metadata"].get("resourceVersion")) for cm in chunks)
        uid = obj["metadata"]["uid"]
        cached = self._decoded.get(uid)
        if cached is not None and cached[0] == key:
            self._decoded.move_to_end(uid)
            return Stored(obj, cached[1], chunks)
        state = decode_chunks(cm.get("data") or {} for cm in chunks)
        self._decoded[uid] = (key, state)
        while len(self._decoded) > DECODED_CACHE_SIZE:
            self._decoded.popitem(last=False)
        return Stored(obj, state, chunks)

    def describe(self, stored: Stored) -> dict[str, Any]:
        """The context as `PUT` and `GET /v1/contexts/:id` answer it."""
        settings = stored.settings
        meta = stored.obj["metadata"]
        created = meta.get("creationTimestamp")
        times = [
            t for t in (created, _last_time(stored.state), (meta.get("annotations") or {}).get(UPDATED_ANNOTATION)) if t
        ]
        body: dict[str, Any] = {
            "id": stored.name,
            "token_budget": settings.token_budget,
            "trigger_ratio": settings.trigger_ratio,
            "policy": _policy_wire(settings),
            "metadata": settings.metadata or {},
            "version": stored.state.version,
            "created_at": created,
            "updated_at": max(times) if times else created,
        }
        if stored.tombstoned:
            body["tombstoned"] = True
        return body

    # -- settings ---------------------------------------------------------------------------------

    async def put(self, name: str, context: dict[str, Any], writer: Any) -> Stored:
        """Creates the Conversation, or replaces its `spec.context` (PUT is idempotent)."""
        check_id(name)
        annotations = {UPDATED_ANNOTATION: now_iso()}
        try:
            await writer.create(
                self._path(),
                {
                    "apiVersion": API_VERSION,
                    "kind": CONVERSATION_KIND,
                    "metadata": {"name": name, "labels": {CONTEXT_LABEL: "true"}, "annotations": annotations},
                    "spec": {"turns": [], "context": context},
                },
            )
        except ApiException as exc:
            if not is_conflict(exc):
                raise _refused(exc) from exc
            current = await self.conversation(name)
            if (current.get("spec") or {}).get("tombstoned"):
                raise _tombstoned(name) from None
            old = (current.get("spec") or {}).get("context") or {}
            # A merge patch merges maps: keys the new settings leave out are removed explicitly.
            replacement = {**{k: None for k in old}, **context}
            try:
                await writer.patch(
                    self._path(name),
                    {
                        "metadata": {"annotations": annotations},
                        "spec": {"context": replacement},
                    },
                )
            except ApiException as err:
                raise _refused(err) from err
        return await self.read(name)

    async def patch_metadata(self, name: str, metadata: dict[str, Any], writer: Any) -> Stored:
        """Upserts keys of `spec.context.metadata` (a `null` value removes a key)."""
        stored = await self.read(name)
        if stored.tombstoned:
            raise _tombstoned(name)
        try:
            await writer.patch(
                self._path(name),
                {
                    "metadata": {"annotations": {UPDATED_ANNOTATION: now_iso()}},
                    "spec": {"context": {"metadata": metadata}},
                },
            )
        except ApiException as exc:
            raise _refused(exc) from exc
        return await self.read(name)

    async def tombstone(self, name: str, writer: Any) -> Stored:
        await self.conversation(name)
        try:
            await writer.patch(
                self._path(name),
                {
                    "metadata": {"annotations": {UPDATED_ANNOTATION: now_iso()}},
                    "spec": {"tombstoned": True},
                },
            )
        except ApiException as exc:
            raise _refused(exc) from exc
        return await self.read(name)

    # -- the log ----------------------------------------------------------------------------------

    async def append(
        self,
        name: str,
        role: str,
        parts: list[dict[str, Any]],
        token_count: int | None,
        metadata: dict[str, Any] | None,
        if_version: int | None,
        writer: Any = None,
    ) -> dict[str, int]:
        def record(stored: Stored) -> MessageRecord:
            seq = len(stored.state.messages) + 1
            chat = to_chat(role, parts, seq)
            tokens = token_count if token_count is not None else estimate(chat)
            return {
                "t": RecordType.MESSAGE,
                "message": chat,
                "context": {
                    "role": role,
                    "parts": parts,
                    "tokenCount": tokens,
                    "metadata": metadata or {},
                    "insertedAt": now_iso(),
                },
            }

        stored, written = await self._write(name, if_version, record, writer)
        return {
            "seq": len(stored.state.messages) + 1,
            "version": stored.state.version + 1,
            "token_estimate": int(written["context"]["tokenCount"]),
        }

    async def compact(
        self, name: str, replacement: list[dict[str, Any]], if_version: int | None, writer: Any = None
    ) -> dict[str, int]:
        def record(stored: Stored) -> CompactionRecord:
            chat = [to_chat(m["role"], m["parts"], 0) for m in replacement]
            before = count_messages(stored.state.working_messages())
            return {
                "t": RecordType.COMPACTION,
                "at": len(stored.state.messages),
                "messages": chat,
                "tokensBefore": before,
                "tokensAfter": sum(estimate(m) for m in chat),
                "context": {"replacement": replacement, "insertedAt": now_iso()},
            }

        stored, _ = await self._write(name, if_version, record, writer)
        return {"version": stored.state.version + 1}

    def tail(self, stored: Stored, offset: int, limit: int) -> list[dict[str, Any]]:
        total = len(stored.state.messages)
        end = max(total - offset, 0)
        start = max(end - limit, 0)
        times = _message_times(stored)
        return [self._entry(stored, i, times[i]) for i in range(start, end)]

    def _entry(self, stored: Stored, index: int, inserted_at: str | None) -> dict[str, Any]:
        record = stored.state.records[stored.state.message_seqs[index]]
        message = stored.state.messages[index]
        own = record.get("context")
        if isinstance(own, dict):
            return {
                "seq": index + 1,
                "role": own.get("role"),
                "parts": own.get("parts") or [],
                "token_count": int(own.get("tokenCount") or 0),
                "metadata": own.get("metadata") or {},
                "inserted_at": own.get("insertedAt"),
            }
        return {
            "seq": index + 1,
            "role": message.get("role"),
            "parts": parts_of(message),
            "token_count": estimate(message),
            "metadata": {},
            "inserted_at": inserted_at,
        }

    # -- the window -------------------------------------------------------------------------------

    def window(self, stored: Stored, budget: int | None) -> dict[str, Any]:
        """What the model gets next: the working messages (the last compaction, then what
        followed), shrunk by the policy when they pass the trigger — the operator's code."""
        state, settings = stored.state, stored.settings
        marked, summary_to = _working(stored)
        chosen = budget or settings.token_budget or DEFAULT_BUDGET
        window: Window = plan_window(marked, policy_of(settings), chosen, settings.trigger_ratio)
        times = _message_times(stored)
        messages: list[dict[str, Any]] = []
        segments: list[dict[str, Any]] = []
        for message in window.messages:
            seq = message.get(_SEQ)
            if seq is None:
                part = message.get(_PARTS)
                messages.append(
                    {
                        "role": message.get(_ROLE) or message.get("role"),
                        "parts": part if part is not None else parts_of(message),
                        "token_count": estimate(_clean(message)),
                    }
                )
                if not segments or segments[-1]["type"] != "summary":
                    segments.append({"type": "summary", "from_seq": 1 if summary_to else 0, "to_seq": summary_to})
                continue
            entry = self._entry(stored, seq - 1, times[seq - 1])
            original = state.messages[seq - 1]
            if _clean(message) != original:  # skip_parts slimmed it: show what the model gets
                entry = {**entry, "parts": parts_of(_clean(message)), "token_count": estimate(_clean(message))}
            messages.append(entry)
            if segments and segments[-1]["type"] == "live" and segments[-1]["to_seq"] == seq - 1:
                segments[-1]["to_seq"] = seq
            else:
                segments.append({"type": "live", "from_seq": seq, "to_seq": seq})
        return {
            "version": state.version,
            "messages": messages,
            "used_tokens": window.used_tokens,
            "budget_tokens": chosen,
            "needs_compaction": window.needs_compaction,
            "segments": segments,
        }

    # -- writing ----------------------------------------------------------------------------------

    async def _write(
        self, name: str, if_version: int | None, make: Any, writer: Any = None
    ) -> tuple[Stored, dict[str, Any]]:
        """Appends the record `make(stored)` builds to the transcript, as the next record, with
        optimistic concurrency; returns the context as it was just before, and the record.

        The transcript's chunks are Lestrade's own storage, so the caller's right to change
        this history is asked of the cluster first, as the caller: `writer` (the caller,
        impersonated) stamps the Conversation (`context-write`, a new value), which RBAC (patch
        conversations) and the requester admission policy (only the creator changes a
        Conversation's history) judge like any change of the caller's. Only then does the API
        write the chunk, with its own identity: writing as the caller would need every
        context-store user to hold create/patch on the namespace's ConfigMaps. The transcript
        admission policy (`lestrade.operator.admission.transcripts`) keeps everyone but Lestrade
        from writing chunks directly, and `owned_chunks` ignores chunks other users signed."""
        if if_version is not None:
            self._check(name, await self.read(name), if_version)  # a stale guard fails without queueing
        await self._stamp(name, writer or self.kube)
        async with self._locks[name]:
            for _ in range(_WRITE_ATTEMPTS):
                stored = await self.read(name)
                self._check(name, stored, if_version)
                record = make(stored)
                if await self._store(stored, record):
                    return stored, record
        raise ContextError(503, "unavailable", f"context {name!r} keeps changing; retry with backoff")

    async def _stamp(self, name: str, writer: Any) -> None:
        # a new value every time (a time alone can repeat within a second: no change to judge)
        stamp = {UPDATED_ANNOTATION: now_iso(), WRITE_ANNOTATION: uuid.uuid4().hex}
        try:
            await writer.patch(self._path(name), {"metadata": {"annotations": stamp}})
        except ApiException as exc:
            raise _refused(exc) from exc

    @staticmethod
    def _check(name: str, stored: Stored, if_version: int | None) -> None:
        if stored.tombstoned:
            raise _tombstoned(name)
        if ConversationView(stored.obj).has_work():
            raise ContextError(
                409, "conflict", f"context {name!r} is answering a turn (spec.turns); append when it ends"
            )
        if if_version is not None and if_version != stored.state.version:
            raise ContextError(
                409, "conflict", f"Context version changed (expected {if_version}, found {stored.state.version})"
            )

    async def _store(self, stored: Stored, record: dict[str, Any]) -> bool:
        """Writes `record` as record number len(records); False when someone else wrote first."""
        key = f"r-{len(stored.state.records):07d}"
        value = json.dumps(record, separators=(",", ":"), ensure_ascii=True)
        if len(value) > MAX_MESSAGE_BYTES:
            raise ContextError(400, "invalid_payload", f"message: larger than {MAX_MESSAGE_BYTES} bytes as stored")
        base = api_path("v1", "configmaps", self.namespace)
        last = stored.chunks[-1] if stored.chunks else None
        used = sum(len(k) + len(v) for k, v in ((last or {}).get("data") or {}).items())
        sealed = last is not None and SEAL_KEY in (last.get("data") or {})
        try:
            if last is not None and not sealed and used + len(key) + len(value) <= self.chunk_limit:
                await self.kube.patch(
                    f"{base}/{last['metadata']['name']}",
                    {
                        "metadata": {"resourceVersion": last["metadata"]["resourceVersion"]},
                        "data": {key: value},
                    },
                    parse=False,
                )
            else:
                if last is not None and not sealed:
                    # Seal the full chunk first (a conditional write like any other): a writer
                    # whose smaller record would still fit it then conflicts and re-reads,
                    # instead of storing the same record number there as this one does in
                    # the next chunk.
                    await self.kube.patch(
                        f"{base}/{last['metadata']['name']}",
                        {
                            "metadata": {"resourceVersion": last["metadata"]["resourceVersion"]},
                            "data": {SEAL_KEY: "true"},
                        },
                        parse=False,
                    )
                index = 1 + int((last or {}).get("metadata", {}).get("labels", {}).get(CHUNK_LABEL, "-1"))
                await self.kube.create(base, self._chunk(stored, index, {key: value}), parse=False)
        except ApiException as exc:
            if is_conflict(exc):
                return False
            raise
        return True

    def _chunk(self, stored: Stored, index: int, data: dict[str, str]) -> dict[str, Any]:
        owner = ConversationView(stored.obj).ref.owner
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": chunk_name(owner["name"], owner["uid"], index),
                "namespace": self.namespace,
                "labels": {TRANSCRIPT_LABEL: owner["uid"], CHUNK_LABEL: str(index)},
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": owner["name"],
                        "uid": owner["uid"],
                        "controller": True,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "data": data,
        }


SEAL_KEY = "sealed"
"""In a transcript chunk no more records go to (not a record key: readers skip it)."""


_SEQ, _PARTS, _ROLE = "__lestrade_seq", "__lestrade_parts", "__lestrade_role"


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in (_SEQ, _PARTS, _ROLE)}


def _working(stored: Stored) -> tuple[list[dict[str, Any]], int]:
    """The working messages marked with their seq (log messages) or their client form
    (compacted ones), and the last seq the compaction replaced (0 when none)."""
    state = stored.state
    live_from = 0
    head: list[dict[str, Any]] = []
    if state.compactions:
        last = state.compactions[-1]
        live_from = int(last["at"])
        own = (last.get("context") or {}).get("replacement")
        for index, message in enumerate(last.get("messages") or []):
            marked = dict(message)
            if isinstance(own, list) and index < len(own):
                marked[_PARTS], marked[_ROLE] = own[index].get("parts"), own[index].get("role")
            head.append(marked)
    live = [{**m, _SEQ: i + 1} for i, m in enumerate(state.messages[live_from:], start=live_from)]
    return head + live, live_from


def _message_times(stored: Stored) -> list[str | None]:
    """When each message was stored: its own time, else the latest time a record before it
    carries (turn starts, answers), else the Conversation's creation."""
    latest = stored.obj["metadata"].get("creationTimestamp")
    times: list[str | None] = []
    for record in stored.state.records:
        fields: Mapping[str, Any] = record  # any kind of record may carry a time
        own = fields.get("context") if isinstance(fields.get("context"), dict) else {}
        stamp = own.get("insertedAt") or (fields.get("at") if isinstance(fields.get("at"), str) else None)  # type: ignore[union-attr]
        latest = stamp or latest
        if record["t"] == RecordType.MESSAGE:
            times.append(latest)
    return times


def _last_time(state: TranscriptState) -> str | None:
    for record in reversed(state.records):
        own = record.get("context")
        if isinstance(own, dict) and own.get("insertedAt"):
            return str(own["insertedAt"])
        if isinstance(record.get("at"), str):
            return str(record["at"])
    return None


def _policy_wire(settings: ContextSettings) -> dict[str, Any] | None:
    policy = settings.compaction
    if policy is None:
        return None
    config: dict[str, Any] = {}
    if policy.limit is not None:
        config["limit"] = policy.limit
    if policy.skip_kinds:
        config["skip_kinds"] = list(policy.skip_kinds)
    return {"strategy": policy.policy, "config": config}


def _tombstoned(name: str) -> ContextError:
    return ContextError(
        409, "context_tombstoned", f"context {name!r} was deleted (tombstoned); its messages stay readable"
    )


def _refused(exc: ApiException) -> Exception:
    """The apiserver refused a write: invalid settings (400), RBAC (403), gone (404)."""
    try:
        message = json.loads(exc.body or "{}").get("message") or exc.reason
    except json.JSONDecodeError:
        message = exc.reason
    if exc.status in (400, 422):
        return ContextError(400, "invalid_payload", str(message))
    if exc.status == 403:
        return ContextError(403, "forbidden", str(message))
    if exc.status == 404:
        return ContextError(404, "not_found", str(message))
    return exc
