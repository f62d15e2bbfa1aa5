"""`/mcp`, `/a2a` and the agent card, built on their first request.

The MCP and A2A SDKs cost an API process ~37 MiB and seconds of CPU to import on the
development machine (pydantic models of both protocols, protobuf), which an API nobody asks
this way should not pay (the API's memory target is 150 MiB with 10,000 runs). So each is an
ASGI app built on first use, importing in a thread (the event loop keeps serving), and an MCP
session manager's lifetime runs in a task of its own (anyio scopes end in the task that
entered them) until the app stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LazyApp", "install_agents", "MCP_PATH", "A2A_PATH", "CARD_PATH"]

MCP_PATH = "/mcp"
A2A_PATH = "/a2a"
CARD_PATH = "/.well-known/agent-card.json"  # a2a.utils.constants.AGENT_CARD_WELL_KNOWN_PATH

Built = tuple[ASGIApp, "AbstractAsyncContextManager[object] | None"]


class LazyApp:
    def __init__(self, build: Callable[[], Built]) -> None:
        self._build = build
        self._app: ASGIApp | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (await self._ready())(scope, receive, send)

    async def _ready(self) -> ASGIApp:
        if self._app is None:
            async with self._lock:
                if self._app is None:
                    app, lifetime = await asyncio.to_thread(self._build)
                    if lifetime is not None:
                        started = asyncio.Event()
                        self._task = asyncio.create_task(self._keep(lifetime, started), name="agents lifetime")
                        await started.wait()
                    self._app = app
        return self._app

    async def _keep(self, lifetime: AbstractAsyncContextManager[object], started: asyncio.Event) -> None:
        async with lifetime:
            started.set()
            await self._stop.wait()

    async def aclose(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task


def _mcp() -> Built:
    from lestrade.api.agents.mcp_server import build_mcp_app

    return build_mcp_app()


def _a2a() -> Built:
    from lestrade.api.agents.a2a_agent import build_a2a_app

    return build_a2a_app(), None


def install_agents(app: FastAPI) -> list[LazyApp]:
    """Adds `/mcp`, `/a2a` and the agent card; returns what the app's lifespan closes."""
    mcp, a2a = LazyApp(_mcp), LazyApp(_a2a)
    app.router.routes.append(Route(MCP_PATH, endpoint=mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    app.router.routes.append(Route(A2A_PATH, endpoint=a2a, methods=["POST"], include_in_schema=False))
    app.router.routes.append(Route(CARD_PATH, endpoint=a2a, methods=["GET"], include_in_schema=False))
    return [mcp, a2a]
