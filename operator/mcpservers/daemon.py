"""The Kopf daemon of every MCPServer: rounds of `reconcile.reconcile` at the refresh interval,
sooner after failures (1 s, doubling) and at once after a spec change."""

from __future__ import annotations

import dataclasses
from typing import Any

import kopf
from kopf._core.intents import handlers as kopf_handlers

from lestrade.operator.base import metrics
from lestrade.operator.base.engine import Engine
from lestrade.operator.base.recorder import EventRecorder
from lestrade.operator.mcpservers.reconcile import reconcile
from lestrade.resources.constants import API_VERSION, GROUP, MCPSERVER_KIND, MCPSERVER_PLURAL, VERSION

__all__ = ["register", "DAEMON_ID"]

DAEMON_ID = "mcpserver"


def register(registry: kopf.OperatorRegistry) -> None:
    """The daemon of every MCPServer (the context comes in as `memo.lestrade`)."""

    @kopf.daemon(GROUP, VERSION, MCPSERVER_PLURAL, registry=registry, id=DAEMON_ID, cancellation_timeout=5, backoff=5)
    async def follow(body: kopf.Body, stopped: kopf.DaemonStopped, memo: Any, **_: Any) -> None:
        engine: Engine = memo.lestrade.engine
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        recorder = EventRecorder(
            engine.kube,
            {
                "apiVersion": API_VERSION,
                "kind": MCPSERVER_KIND,
                "name": name,
                "namespace": namespace,
                "uid": meta["uid"],
            },
            engine.component,
            engine.settings.pod_name,
        )
        refresh = engine.settings.tools.mcp_refresh
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
