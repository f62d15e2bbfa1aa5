"""Tool permissions of an agent-harness session (reference 003): rules first, then relays.

A harness session is a Conversation with `spec.harness`. Every tool call of every agent in it
(the main agent and its subagents) goes through the session's `Gate` before it runs:

1. a `deny` rule naming the call's id refuses it;
2. an `allowlist` rule matching the tool and its parameter globs lets it run;
3. an unused `allowOnce` rule matching it lets it run and is spent;
4. otherwise the call becomes a *relay*: a pending approval in status.pendingApprovals (the
   same one `kubectl patch ... spec.decisions` answers, and the API's
   `POST /chat/relay/:relayId` writes), and only the agent that made the call waits for it.

Every verdict is a `decision` record in the transcript (with the rule it came from), written
before the call runs, so a spent `allowOnce` stays spent across restarts and the API can show
what happened from the transcript alone. Rules are read from the newest spec the session's
watch has seen, so a rule added meanwhile (`always: true`) applies to the next call.

A relay waits inside the running attempt (a subagent's relay must not stop its siblings), on a
watch of this one object (`DecisionWatch`); the wait is bounded by the turn's deadline.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from lestrade.kube import Kube, conversation_path
from lestrade.operator.agent.toolcalls import Call, execute
from lestrade.operator.status.projection import ConversationProjection
from lestrade.operator.tools.base import Tool, ToolOutput
from lestrade.operator.tools.bash.parse import BashParseError, parse_command
from lestrade.resources.conversation import HarnessSettings, Permissions, ToolPermission
from lestrade.runs.records import AgentFields, ApprovalNeededRecord, DecisionRecord, PendingCall, Record
from lestrade.runs.transcript import RecordType, Transcript

__all__ = [
    "AgentTag",
    "MAIN_AGENT",
    "rule_matches",
    "DecisionWatch",
    "Gate",
    "GatedTool",
    "DECISION_MISMATCH",
]

logger = logging.getLogger(__name__)

DECISION_MISMATCH = (
    "the decision was made for a different call (another tool or other arguments), so it was not applied"
)
WATCH_RETRY_SECONDS = 1.0
"""Pause before re-opening the session's watch after it failed (not a test synchronization)."""


@dataclass(frozen=True)
class AgentTag:
    """Which agent of the session did something: the main agent (depth 0) or a subagent,
    whose parent is the `agent` tool call that spawned it."""

    agent_id: str
    parent_id: str | None = None
    depth: int = 0

    def fields(self) -> AgentFields:
        """The fields a subagent's transcript records carry (none for the main agent, whose
        records are the conversation's own)."""
        if self.parent_id is None:
            return {}
        return {"agentId": self.agent_id, "parentId": self.parent_id, "depth": self.depth}

    def marked(self, record: Record) -> Record:
        """`record` with this agent's fields."""
        return cast(Record, {**record, **self.fields()})


MAIN_AGENT = AgentTag("main")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _command_matches(command: str, pattern: str) -> bool:
    """A bash command line matches a command glob only when every stage of every pipeline,
    as the bash tool itself parses it, does: `kubectl get *` must not also allow
    `kubectl get x; sh -c ...` or `kubectl get x | sh`. A line that needs a shell (variables,
    substitutions, subshells) or that the parser cannot read matches nothing."""
    try:
        line = parse_command(command)
    except BashParseError:
        return False
    if line.unsupported:
        return False
    stages = line.stages()
    return bool(stages) and all(
        fnmatch.fnmatchcase(" ".join([*stage.argv, *(_redirect_text(r) for r in stage.redirects)]), pattern)
        for stage in stages
    )


def _redirect_text(redirect: Any) -> str:
    if redirect.op == "dup":
        return f"{redirect.fd}>&{redirect.target}"
    return (
        f"{'' if redirect.fd in (0, 1) else ('&' if redirect.fd == -1 else redirect.fd)}{redirect.op}{redirect.target}"
    )


def rule_matches(rule: ToolPermission, name: str, params: dict[str, Any]) -> bool:
    """The rule's tool glob matches the tool's name and each of its parameter globs matches
    the call's value (fnmatch, case-sensitive; a non-string value is matched as its JSON
    text). The bash tool's `command` is matched per parsed pipeline stage (`_command_matches`)."""
    if not fnmatch.fnmatchcase(name, rule.tool):
        return False
    for key, pattern in (rule.params or {}).items():
        if key not in params:
            return False
        if name == "bash" and key == "command" and isinstance(params[key], str):
            if not _command_matches(params[key], pattern):
                return False
        elif not fnmatch.fnmatchcase(_as_text(params[key]), pattern):
            return False
    return True


class DecisionWatch:
    """The newest version of one Conversation, kept by a watch on it alone; waiters wake on
    every change. Started on first use (most sessions never relay)."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self.object: dict[str, Any] | None = None
        self.gone = False
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._first = asyncio.Event()

    def _update(self, obj: dict[str, Any]) -> None:
        self.object = obj
        self._first.set()
        self._changed.set()
        self._changed = asyncio.Event()

    async def _run(self) -> None:
        path = conversation_path(self._namespace, self._name)
        while True:
            try:
                obj = await self._kube.get(path)
                self._update(obj)
                version = obj["metadata"]["resourceVersion"]
                async for event in self._kube.watch(
                    conversation_path(self._namespace),
                    resource_version=version,
                    fieldSelector=f"metadata.name={self._name}",
                ):
                    kind = event.get("type")
                    if kind in ("ADDED", "MODIFIED"):
                        self._update(event["object"])
                    elif kind == "DELETED":
                        self.gone = True
                        self._update(event["object"])
                        return
                    elif kind == "ERROR":
                        break  # e.g. 410 Gone: read again and watch from there
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the apiserver went away for a moment: try again
                logger.info("watch of conversation %s failed (%s); retrying", self._name, exc)
                await asyncio.sleep(WATCH_RETRY_SECONDS)

    async def wait_for(self, pick: Callable[[dict[str, Any]], Any]) -> Any:
        """The first non-None `pick(object)`, now or after a later change."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"harness watch {self._name}")
        await self._first.wait()
        while True:
            changed = self._changed
            assert self.object is not None
            found = pick(self.object)
            if found is not None:
                return found
            if self.gone:
                raise asyncio.CancelledError(f"conversation {self._name} was deleted")
            await changed.wait()

    def spec(self) -> dict[str, Any] | None:
        return None if self.object is None else self.object.get("spec") or {}

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


class Gate:
    """Decides the tool calls of one harness session; see the module docstring."""

    def __init__(
        self,
        *,
        transcript: Transcript,
        projection: ConversationProjection,
        settings: HarnessSettings,
        watch: DecisionWatch,
        sync: Callable[[], Awaitable[None]],
        kubectl_hint: str,
    ) -> None:
        self.transcript = transcript
        self.projection = projection
        self.settings = settings
        self.watch = watch
        self.sync = sync
        self.kubectl_hint = kubectl_hint
        self.waiting: dict[str, PendingCall] = {}
        self._spent: set[str] = set()
        self._status_lock = asyncio.Lock()

    def _permissions(self) -> Permissions:
        """The newest rules: from the watched spec when it has been read, else the attempt's."""
        spec = self.watch.spec()
        if spec is not None:
            try:
                harness = HarnessSettings.model_validate(spec.get("harness") or {})
                return harness.permissions or Permissions()
            except ValidationError:
                pass  # an invalid edit: keep the rules the session started with
        return self.settings.permissions or Permissions()

    def _spent_rules(self) -> set[str]:
        used = {
            str(r.get("rule")) for r in self.transcript.state.records if r["t"] == RecordType.DECISION and r.get("rule")
        }
        return used | self._spent

    def _record(self, call: Call, tag: AgentTag, approved: bool, reason: str | None, rule: str | None) -> None:
        if call.id in self.transcript.state.decisions:
            return
        record = DecisionRecord(t=RecordType.DECISION, id=call.id, approved=approved, reason=reason, digest=call.digest)
        if rule:
            record["rule"] = rule
        self.transcript.append(tag.marked(record))

    def by_rules(self, call: Call, tag: AgentTag, *, may_allow: bool = True) -> tuple[bool, str | None] | None:
        """The rules' verdict (recorded), or None when the call must be relayed. With
        `may_allow` false (the tool itself would ask a person), no allow rule applies: a
        harness rule never skips a tool's own approval tier."""
        stored = self.transcript.state.decisions.get(call.id)
        if stored is not None:  # decided before a restart
            return bool(stored["approved"]), stored.get("reason")
        name, params = call.name, call.params or {}
        rules = self._permissions()
        for deny in rules.deny or []:
            if deny.tool_call_id == call.id:
                reason = deny.reason or "denied by the session's rules"
                self._record(call, tag, False, reason, "deny")
                return False, reason
        if not may_allow:
            return None
        for index, rule in enumerate(rules.allowlist or []):
            if rule_matches(rule, name, params):
                self._record(call, tag, True, None, f"allowlist[{index}]")
                return True, None
        spent = self._spent_rules()
        for index, rule in enumerate(rules.allow_once or []):
            key = f"allowOnce[{index}]:{json.dumps(rule.to_wire(), sort_keys=True)}"
            if key not in spent and rule_matches(rule, name, params):
                self._spent.add(key)  # before any await: a concurrent call cannot reuse it
                self._record(call, tag, True, None, key)
                return True, None
        return None

    async def decide(
        self, call: Call, tag: AgentTag, description: str, needs_person: bool = False
    ) -> tuple[bool, str | None]:
        """(approved, reason) for this call: by the rules, or by whoever answers its relay
        (always a relay when the tool's own tier would send the call to a person)."""
        verdict = self.by_rules(call, tag, may_allow=not needs_person)
        if verdict is not None:
            return verdict
        return await self._relay(call, tag, description)

    async def _relay(self, call: Call, tag: AgentTag, description: str) -> tuple[bool, str | None]:
        self.waiting[call.id] = {
            "toolCallId": call.id,
            "toolName": call.name,
            "description": description,
            "params": call.params or {},
            "digest": call.digest,
            "agentId": tag.agent_id,
            **tag.fields(),
        }
        self.transcript.append(ApprovalNeededRecord(t=RecordType.APPROVAL_NEEDED, pending=list(self.waiting.values())))
        await self.sync()
        await self._show()
        decision = await self.watch.wait_for(lambda obj: ((obj.get("spec") or {}).get("decisions") or {}).get(call.id))
        approved = bool(decision.get("approved"))
        reason = decision.get("reason")
        digest = decision.get("digest")
        if digest and digest != call.digest:
            approved, reason = False, DECISION_MISMATCH
        self.waiting.pop(call.id, None)
        self._record(call, tag, approved, reason, None)
        await self.sync()
        await self._show()
        return approved, reason

    async def _show(self) -> None:
        """Status says which relays wait (the admission policy accepts decisions only for
        calls that status lists), or that the turn runs on."""
        async with self._status_lock:
            state, reference = self.transcript.state, self.transcript.reference()
            if self.waiting:
                ids = ", ".join(self.waiting)
                message = (
                    f"{len(self.waiting)} tool call(s) wait for a decision (relay): {ids}. "
                    f"Answer with POST /chat/relay/<id> or {self.kubectl_hint}"
                )
                self.projection.awaiting(state, message, reference)
            else:
                self.projection.relays_settled(state, "Running: every relay is decided")
            await self.projection.writer.flush()


@dataclass
class GatedTool:
    """A tool of a harness session: every call asks the gate first (the engine's own
    approval step is not used: the gate's relay is the approval)."""

    inner: Tool
    gate: Gate
    tag: AgentTag
    timeout: float
    """The tool's own time limit (the engine's limit for harness tools is the whole turn,
    because a relay may wait that long)."""

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def parameters(self) -> dict[str, Any]:
        return self.inner.parameters

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        try:
            return str(self.inner.describe(params))
        except Exception:
            return self.inner.name

    def interrupted(self, call: Call) -> str | None:
        """What became of a call a restart interrupted, when the tool can tell (`agents.py`)."""
        told = getattr(self.inner, "interrupted", None)
        return told(call) if callable(told) else None

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        raise RuntimeError("a harness tool runs through run_call (it needs the call's id)")

    async def run_call(self, call: Call, params: dict[str, Any]) -> ToolOutput:
        # A command glob cannot say what a command line does; the bash tool's own tier can, so
        # what it would send to a person goes to one even when a rule matches.
        try:
            needs_person = self.inner.name == "bash" and bool(self.inner.needs_approval(params))
        except Exception:
            needs_person = True
        approved, reason = await self.gate.decide(call, self.tag, self.describe(params), needs_person)
        if not approved:
            why = f" Reason: {reason}" if reason else ""
            return ToolOutput("denied", data=f"The user denied this tool call; it was not run.{why}")  # type: ignore[arg-type]
        run_call = getattr(self.inner, "run_call", None)
        if run_call is not None:
            return await run_call(call, params)  # bounded by the turn (a subagent)
        return await execute(self.inner, params, self.timeout)
