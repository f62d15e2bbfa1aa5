"""MCP tool calls: what a session per call costs (connect, initialize, one tools/call, close).

Starts the test MCP server (`lestrade.testing.mcp_testserver`) and times calls of its `echo`
tool through the product's client, and of `huge` (1 MB through redaction and truncation, as a
run gets it). Prints wall and CPU time per call; no target (the client's design trades one
initialize round trip per call for never reusing a broken session), so it never fails.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from lestrade.operator.tools.mcp import McpHub, Policy, ServerConfig, build_catalog, discover
from lestrade.operator.tools.mcp.client import call_tool
from lestrade.testing.mcp_fixtures import McpProcess, free_port

CALLS = 30


async def main() -> None:
    folder = Path(tempfile.mkdtemp())
    port = free_port()
    server = McpProcess(
        [sys.executable, "-m", "lestrade.testing.mcp_testserver", "--port", str(port), "--effects", str(folder)],
        port,
        folder / "mcp.log",
        folder,
    ).start()
    try:
        config = ServerConfig(server.url)
        await call_tool(config, "echo", {"text": "warm up"})
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(CALLS):
            await call_tool(config, "echo", {"text": "x"})
        print(
            f"echo: {(time.perf_counter() - wall) / CALLS * 1000:.1f} ms wall, "
            f"{(time.process_time() - cpu) / CALLS * 1000:.1f} ms client CPU per call (session each)"
        )
        hub = McpHub()
        entry = hub.entry("bench", "tsrv")
        entry.config = config
        entry.tools, _ = build_catalog("tsrv", (await discover(config)).tools, Policy(trust_hints=True))
        huge = next(t for ts in hub.toolsets(hub.servers_for("bench")) for t in ts.tools if t.name == "tsrv__huge")
        wall, cpu = time.perf_counter(), time.process_time()
        out = await huge.run({"size": 1_000_000})
        print(
            f"huge (1 MB answer -> {len(out.data)} chars): {(time.perf_counter() - wall) * 1000:.0f} ms wall, "
            f"{(time.process_time() - cpu) * 1000:.0f} ms client CPU"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
