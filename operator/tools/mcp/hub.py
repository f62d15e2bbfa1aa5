"""The MCP servers this process knows, and the toolsets a run gets from them.

The operator's MCPServer reconciler (`lestrade.operator.mcpservers`) keeps one entry per
server: its connection settings (headers included: they stay in this process's memory) and
the tools it last listed. A run gets the servers of its own namespace plus those the admin
shared with it (`mcpServers` in the scope policy); a shared server whose name is already taken
by one of the run's own namespace (or an earlier shared one) is left out, so `<server>__<tool>`
always names one tool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lestrade.operator.tools.base import Toolset
from lestrade.operator.tools.mcp.catalog import McpToolInfo
from lestrade.operator.tools.mcp.client import ServerConfig
from lestrade.operator.tools.mcp.toolset import INSTRUCTIONS, Observer, mcp_tool

__all__ = ["McpHub", "McpServerEntry", "SharedServers"]

logger = logging.getLogger(__name__)


class SharedServers(Protocol):
    servers: tuple[str, ...]

    def covers(self, namespace: str, name: str) -> bool: ...


@dataclass
class McpServerEntry:
    namespace: str
    name: str
    config: ServerConfig | None = None  # None: not usable (bad spec, unreadable Secret)
    tools: list[McpToolInfo] = field(default_factory=list)
    max_output_chars: int = 30_000
    ready: bool = False
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the first discovery of this process ended (ready or not)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Loader = Callable[[str, Sequence[SharedServers]], Awaitable[None]]


class McpHub:
    def __init__(self, observe: Observer | None = None) -> None:
        self._servers: dict[tuple[str, str], McpServerEntry] = {}
        self.observe = observe
        self.loader: Loader | None = None
        """Job mode: no daemons follow the servers, so a run loads its own (namespace, grants)."""

    def entry(self, namespace: str, name: str) -> McpServerEntry:
        """The entry of a server, made on first use."""
        key = (namespace, name)
        if key not in self._servers:
            self._servers[key] = McpServerEntry(namespace, name)
        return self._servers[key]

    def remove(self, namespace: str, name: str) -> None:
        self._servers.pop((namespace, name), None)

    def servers_for(self, namespace: str, shared: Iterable[SharedServers] = ()) -> list[McpServerEntry]:
        """The run's servers: its namespace's by name, then the shared ones by namespace/name."""
        grants = list(shared)
        own = sorted((e for (ns, _), e in self._servers.items() if ns == namespace), key=lambda e: e.name)
        others = sorted(
            (e for (ns, n), e in self._servers.items() if ns != namespace and any(g.covers(ns, n) for g in grants)),
            key=lambda e: e.key,
        )
        chosen: list[McpServerEntry] = []
        names: set[str] = set()
        for entry in own + others:
            if entry.name in names:
                logger.info(
                    "MCP server %s not offered to a run in %s: the name %s is taken", entry.key, namespace, entry.name
                )
                continue
            names.add(entry.name)
            chosen.append(entry)
        return chosen

    async def wait_settled(self, entries: Iterable[McpServerEntry], timeout: float) -> None:
        """Waits (at most `timeout`) until each server's first discovery ended: a run that
        starts as the operator starts still gets the tools of servers that are up."""
        pending = [e.settled.wait() for e in entries if not e.settled.is_set()]
        if pending:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.gather(*pending)
            except TimeoutError:
                pass

    def toolsets(self, entries: Iterable[McpServerEntry]) -> list[Toolset]:
        """One toolset per server with tools; tools call through the hub's current settings."""
        toolsets: list[Toolset] = []
        for entry in entries:
            if not entry.tools:
                continue

            def current(entry: McpServerEntry = entry) -> tuple[ServerConfig, int] | None:
                live = self._servers.get((entry.namespace, entry.name))
                if live is None or live.config is None:
                    return None
                return live.config, live.max_output_chars

            tools = [mcp_tool(entry.key, info, current, self.observe) for info in entry.tools]
            toolsets.append(
                Toolset(name=f"mcp:{entry.key}", tools=list(tools), instructions="" if toolsets else INSTRUCTIONS)
            )
        return toolsets
