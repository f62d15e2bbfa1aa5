"""An MCP client for the API tests: the official SDK's streamable HTTP client and session,
over a real socket, with the caller's bearer token on every request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

__all__ = ["mcp_session"]


@asynccontextmanager
async def mcp_session(base: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as http, \
            streamable_http_client(f"{base}/mcp", http_client=http) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session
