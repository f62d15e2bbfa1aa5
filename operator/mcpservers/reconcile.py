"""MCPServers: one round connects, lists the tools, and updates status and the process's hub
(`tools/mcp/hub.py`); `daemon.py` runs rounds per server in the operator, `load_for_run` lists
a run's servers in a Job's pod (no Kopf here: the Job's entrypoint imports this).

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
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from lestrade.kube import ApiException, Kube, api_path, resource_path
from lestrade.operator.base import metrics
from lestrade.operator.base.engine import Engine
from lestrade.operator.base.recorder import EventRecorder
from lestrade.operator.tools.mcp import McpFailure, Policy, ServerConfig, build_catalog, discover
from lestrade.operator.tools.mcp.catalog import clean_text
from lestrade.operator.tools.mcp.hub import McpServerEntry
from lestrade.resources import condition, set_condition
from lestrade.resources.common import parse_duration
from lestrade.resources.constants import CONDITION_READY, MCPSERVER_PLURAL
from lestrade.resources.mcpserver import MCP_CREDENTIALS_LABEL, MCPServer, MCPServerStatus
from lestrade.timefmt import to_iso

__all__ = ["reconcile", "load_for_run", "NotUsable"]

logger = logging.getLogger(__name__)

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
                    raise NotUsable(
                        "SecretForbidden",
                        f"{where}: the operator may not read Secret {ref.name} "
                        "(chart value mcpServers.readHeaderSecrets)",
                    ) from None
                raise
        secret = secrets[ref.name]
        labels = (secret.get("metadata") or {}).get("labels") or {}
        if labels.get(MCP_CREDENTIALS_LABEL) != "true":
            raise NotUsable(
                "SecretNotLabelled",
                f"{where}: Secret {ref.name} lacks the label "
                f"{MCP_CREDENTIALS_LABEL}=true (only Secrets meant for MCP servers are used)",
            )
        data = secret.get("data") or {}
        if ref.key not in data:
            raise NotUsable("SecretKeyMissing", f"{where}: Secret {ref.name} has no key {ref.key}")
        try:
            value = base64.b64decode(data[ref.key]).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError):
            raise NotUsable(
                "SecretKeyMissing", f"{where}: the value of {ref.name}/{ref.key} is not UTF-8 text"
            ) from None
        if any(c in value for c in "\r\n\x00"):
            raise NotUsable("InvalidSpec", f"{where}: the value of {ref.name}/{ref.key} spans lines")
        headers[header.name] = value
    return headers


def _policy(server: MCPServer) -> Policy:
    spec = server.spec
    return Policy(
        include=tuple(spec.tools.include),
        exclude=tuple(spec.tools.exclude),
        rules=tuple((tuple(rule.tools), rule.approval) for rule in spec.approval),
        trust_hints=spec.trust_hints,
    )


async def _list(engine: Engine, body: dict[str, Any], entry: McpServerEntry) -> tuple[Any, list[Any], list[Any]]:
    """Reads the spec and its Secrets into `entry.config`, lists the tools: (discovery, offered
    tools, skipped tools). Raises NotUsable with the condition's reason."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
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
        url=server.spec.url,
        transport=server.spec.transport,
        headers=await _headers(engine.kube, namespace, server),
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
    )
    if entry.config is not None and entry.config != config:
        entry.tools = []  # a changed server: its old listing says nothing about the new one
    entry.config, entry.max_output_chars = config, server.spec.max_output_chars
    try:
        found = await discover(config)
    except McpFailure as exc:
        raise NotUsable("ConnectFailed", str(exc)) from None
    tools, skipped = build_catalog(name, found.tools, _policy(server))
    return found, tools, skipped


async def load_for_run(engine: Engine, namespace: str, shared: Sequence[Any]) -> None:
    """Job mode: a Job's pod has no daemons, so it lists the servers a run gets itself (once,
    without writing status: the operator's daemons do that)."""
    wanted = {namespace} | {s.split("/", 1)[0] for grant in shared for s in grant.servers}
    for ns in sorted(wanted):
        try:
            listing = await engine.kube.get(resource_path(MCPSERVER_PLURAL, ns))
        except ApiException as exc:
            logger.warning("cannot list the MCPServers of %s: %s", ns, exc.reason)
            continue
        for item in listing.get("items") or []:
            name = item["metadata"]["name"]
            if ns != namespace and not any(g.covers(ns, name) for g in shared):
                continue
            entry = engine.mcp.entry(ns, name)
            try:
                _, entry.tools, _ = await _list(engine, item, entry)
                _settle(entry, ready=True)
            except NotUsable as exc:
                logger.warning("MCP server %s/%s not usable: %s", ns, name, exc)
                _settle(entry, ready=False)


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
        found, tools, skipped = await _list(engine, body, entry)
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
    message = f"{len(tools)} tools offered ({unattended} run unattended, {len(tools) - unattended} need approval)" + (
        f"; {len(skipped)} skipped" if skipped else ""
    )
    ready = condition(CONDITION_READY, True, "Connected", message, observed_generation=generation)
    status.update(
        tools=[
            {
                "name": t.name,
                "tool": t.tool,
                "description": clean_text(t.description, 256),
                "approval": t.approval,
                **({"readOnly": t.read_only} if t.read_only is not None else {}),
                **({"destructive": t.destructive} if t.destructive is not None else {}),
            }
            for t in tools[:_STATUS_TOOLS]
        ],
        toolCount=len(tools),
        skippedTools=[
            {"tool": clean_text(s.tool, 80), "reason": clean_text(s.reason, 256)} for s in skipped[:_STATUS_SKIPPED]
        ],
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


async def _write(
    kube: Kube,
    namespace: str,
    name: str,
    before: MCPServerStatus,
    ready: Any,
    status: dict[str, Any],
    old: dict[str, Any],
    recorder: EventRecorder | None,
) -> None:
    previous = next((c for c in before.conditions if c.type == CONDITION_READY), None)
    changed = previous is None or (previous.status, previous.reason, previous.message) != (
        ready.status,
        ready.reason,
        ready.message,
    )
    if changed or previous.observed_generation != ready.observed_generation:  # type: ignore[union-attr]
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
