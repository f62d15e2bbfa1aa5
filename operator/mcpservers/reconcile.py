"""MCPServers: a Kopf daemon per server connects, lists its tools, and keeps status and the
process's hub (`tools/mcp/hub.py`) current.

A round reads the spec and the headers' Secrets, lists the tools (a session of its own, see
`tools/mcp/client.py`), applies the filters and approval policy (`catalog.py`), and writes
status: `Ready` (True `Connected`; False with the reason: `InvalidSpec`, `SecretNotFound`,
`SecretForbidden`, `SecretNotLabelled`, `SecretKeyMissing`, `ConnectFailed`), the tools with
their hints and approval, the skipped ones and why, `lastError`, `observedGeneration`. A Ready
server is listed again every `mcp_refresh` seconds; a failing one sooner (1 s, doubling), and
any spec change starts a round at once. Header values never leave the hub: not in status, not
in Events, not in logs, not to the model.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from datetime import UTC, datetime
from typing import Any

import kopf
from kopf._core.intents import handlers as kopf_handlers
from pydantic import ValidationError

from lestrade.kube import ApiException, Kube, api_path, resource_path
from lestrade.resources import condition, set_condition
from lestrade.resources.common import parse_duration
from lestrade.resources.constants import API_VERSION, CONDITION_READY, GROUP, MCPSERVER_KIND, MCPSERVER_PLURAL, VERSION
from lestrade.resources.mcpserver import MCP_CREDENTIALS_LABEL, MCPServer, MCPServerStatus
from lestrade.timefmt import to_iso

from lestrade.operator.base import metrics
from lestrade.operator.base.engine import Engine
from lestrade.operator.base.recorder import EventRecorder
from lestrade.operator.tools.mcp import McpFailure, Policy, ServerConfig, build_catalog, discover
from lestrade.operator.tools.mcp.catalog import clean_text
from lestrade.operator.tools.mcp.hub import McpServerEntry

__all__ = ["reconcile", "register", "NotUsable"]

logger = logging.getLogger(__name__)

DAEMON_ID = "mcpserver"
_STATUS_TOOLS = 256
_STATUS_SKIPPED = 64


class NotUsable(Exception):
    """The server cannot be used as specified; `reason` is the condition's reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def _headers(kube: Kube, namespace: str, server: MCPServer) -> dict[str, str]:
    headers: dict[str, str] = {}
    secrets: dict[str, dict[str, Any]] = {}
    for i, header in enumerate(server.spec.headers):
        ref = header.secret_key_ref
        where = f"spec.headers[{i}] ({header.name})"
        if ref.name not in secrets:
            try:
                secrets[ref.name] = await kube.get(api_path("v1", "secrets", namespace, ref.name))
            except ApiException as exc:
                if exc.status == 404:
                    raise NotUsable("SecretNotFound", f"{where}: Secret {ref.name} not found") from None
                if exc.status == 403:
                    raise NotUsable("SecretForbidden", f"{where}: the operator may not read Secret {ref.name} "
                                    "(chart value mcpServers.readHeaderSecrets)") from None
                raise
        secret = secrets[ref.name]
        labels = (secret.get("metadata") or {}).get("labels") or {}
        if labels.get(MCP_CREDENTIALS_LABEL) != "true":
            raise NotUsable("SecretNotLabelled", f"{where}: Secret {ref.name} lacks the label "
                            f"{MCP_CREDENTIALS_LABEL}=true (only Secrets meant for MCP servers are used)")
        data = secret.get("data") or {}
        if ref.key not in data:
            raise NotUsable("SecretKeyMissing", f"{where}: Secret {ref.name} has no key {ref.key}")
        try:
            value = base64.b64decode(data[ref.key]).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError):
            raise NotUsable("SecretKeyMissing", f"{where}: the value of {ref.name}/{ref.key} is not UTF-8 text") from None
        if any(c in value for c in "\r\n\x00"):
            raise NotUsable("InvalidSpec", f"{where}: the value of {ref.name}/{ref.key} spans lines")
        headers[header.name] = value
    return headers


def _policy(server: MCPServer) -> Policy:
    spec = server.spec
    return Policy(
        include=tuple(spec.tools.include), exclude=tuple(spec.tools.exclude),
        rules=tuple((tuple(rule.tools), rule.approval) for rule in spec.approval),
        trust_hints=spec.trust_hints,
    )


async def reconcile(engine: Engine, body: dict[str, Any], recorder: EventRecorder | None = None) -> bool:
    """One round for the MCPServer in `body`; True when its tools were listed."""
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
    key = f"{namespace}/{name}"
    entry = engine.mcp.entry(namespace, name)
    old_status = dict(body.get("status") or {})
    before = MCPServerStatus.model_validate(old_status) if old_status else MCPServerStatus()
    status: dict[str, Any] = {"observedGeneration": generation}
    try:
        try:
            server = MCPServer.model_validate(body)
            call_timeout = parse_duration(server.spec.timeouts.call)
            connect_timeout = parse_duration(server.spec.timeouts.connect)
        except (ValidationError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                error = exc.errors()[0]
                where = ".".join(str(p) for p in error.get("loc") or ())
                text = f"{where}: {error['msg']}"
            else:
                text = f"spec.timeouts: {exc}"
            raise NotUsable("InvalidSpec", text) from None
        config = ServerConfig(
            url=server.spec.url, transport=server.spec.transport,
            headers=await _headers(engine.kube, namespace, server),
            connect_timeout=connect_timeout, call_timeout=call_timeout,
        )
        if entry.config is not None and entry.config != config:
            entry.tools = []  # a changed server: its old listing says nothing about the new one
        entry.config, entry.max_output_chars = config, server.spec.max_output_chars
        try:
            found = await discover(config)
        except McpFailure as exc:
            raise NotUsable("ConnectFailed", str(exc)) from None
        tools, skipped = build_catalog(name, found.tools, _policy(server))
    except NotUsable as exc:
        message = clean_text(str(exc), 1000)
        _settle(entry, ready=False)
        metrics.MCP_DISCOVERIES.labels(key, "error").inc()
        metrics.MCP_SERVER_UP.labels(key).set(0)
        metrics.MCP_TOOLS.labels(key).set(0)
        ready = condition(CONDITION_READY, False, exc.reason, message, observed_generation=generation)
        status.update(tools=[], toolCount=0, skippedTools=[], lastError=message)
        await _write(engine.kube, namespace, name, before, ready, status, old_status, recorder)
        return False
    entry.tools = tools
    _settle(entry, ready=True)
    metrics.MCP_DISCOVERIES.labels(key, "ok").inc()
    metrics.MCP_SERVER_UP.labels(key).set(1)
    metrics.MCP_TOOLS.labels(key).set(len(tools))
    unattended = sum(t.approval == "Unattended" for t in tools)
    message = (f"{len(tools)} tools offered ({unattended} run unattended, {len(tools) - unattended} "
               f"need approval)" + (f"; {len(skipped)} skipped" if skipped else ""))
    ready = condition(CONDITION_READY, True, "Connected", message, observed_generation=generation)
    status.update(
        tools=[{
            "name": t.name, "tool": t.tool, "description": clean_text(t.description, 256),
            "approval": t.approval,
            **({"readOnly": t.read_only} if t.read_only is not None else {}),
            **({"destructive": t.destructive} if t.destructive is not None else {}),
        } for t in tools[:_STATUS_TOOLS]],
        toolCount=len(tools),
        skippedTools=[{"tool": clean_text(s.tool, 80), "reason": clean_text(s.reason, 256)}
                      for s in skipped[:_STATUS_SKIPPED]],
        server=clean_text(found.server, 128) or None,
        lastError=old_status.get("lastError"),
        lastConnected=to_iso(datetime.now(UTC)),
    )
    if status["server"] is None:
        status.pop("server")
    if status["lastError"] is None:
        status.pop("lastError")
    await _write(engine.kube, namespace, name, before, ready, status, old_status, recorder)
    return True


def _settle(entry: McpServerEntry, *, ready: bool) -> None:
    entry.ready = ready
    if not ready:
        entry.tools = []
    entry.settled.set()


async def _write(kube: Kube, namespace: str, name: str, before: MCPServerStatus, ready: Any,
                 status: dict[str, Any], old: dict[str, Any], recorder: EventRecorder | None) -> None:
    previous = next((c for c in before.conditions if c.type == CONDITION_READY), None)
    changed = previous is None or (previous.status, previous.reason, previous.message) != (
        ready.status, ready.reason, ready.message)
    if changed or previous.observed_generation != ready.observed_generation:
        status["conditions"] = [c.to_wire() for c in set_condition(before.conditions, ready)]
    if changed and recorder is not None:
        if ready.status == "True":
            recorder.post("Connected", ready.message)
        else:
            recorder.post(ready.reason, ready.message, "Warning")
    if all(old.get(k) == v for k, v in status.items() if k != "lastConnected") and not changed:
        return  # only the listing time moved: no write (and no watch event) per refresh
    try:
        await kube.patch(resource_path(MCPSERVER_PLURAL, namespace, name) + "/status", {"status": status}, parse=False)
    except ApiException as exc:
        if exc.status != 404:
            raise


def register(registry: kopf.OperatorRegistry) -> None:
    """The daemon of every MCPServer (the context comes in as `memo.lestrade`)."""

    @kopf.daemon(GROUP, VERSION, MCPSERVER_PLURAL, registry=registry, id=DAEMON_ID,
                 cancellation_timeout=5, backoff=5)
    async def follow(body: kopf.Body, stopped: kopf.DaemonStopped, memo: Any, **_: Any) -> None:
        engine: Engine = memo.lestrade.engine
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        recorder = EventRecorder(engine.kube, {
            "apiVersion": API_VERSION, "kind": MCPSERVER_KIND, "name": name,
            "namespace": namespace, "uid": meta["uid"],
        }, engine.component)
        refresh = engine.settings.mcp_refresh
        backoff = 1.0
        try:
            while not stopped:
                generation = body["metadata"].get("generation")
                ok = await reconcile(engine, dict(body), recorder)
                delay = refresh if ok else backoff
                backoff = 1.0 if ok else min(backoff * 2, refresh)
                # Kopf keeps `body` current: a spec change (new generation) starts a round at once.
                waited = 0.0
                while not stopped and waited < delay and body["metadata"].get("generation") == generation:
                    step = min(0.5, delay - waited)
                    await stopped.wait(step)
                    waited += step
        finally:
            engine.mcp.remove(namespace, name)
            key = f"{namespace}/{name}"
            for gauge in (metrics.MCP_SERVER_UP, metrics.MCP_TOOLS):
                try:
                    gauge.remove(key)
                except KeyError:
                    pass

    # No finalizer: nothing outside this process needs cleaning when an MCPServer goes (its
    # hub entry and gauges go when Kopf stops the daemon), and a finalizer would hold the
    # object (and its namespace) while no operator runs.
    spawning = registry._spawning._handlers  # noqa: SLF001 - as handlers._without_finalizer
    for index, handler in enumerate(spawning):
        if isinstance(handler, kopf_handlers.DaemonHandler) and str(handler.id).endswith(DAEMON_ID):
            spawning[index] = dataclasses.replace(handler, requires_finalizer=False)
