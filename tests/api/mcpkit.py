"""MCP clients for the API tests, over real sockets with the caller's bearer token: the official
SDK's streamable HTTP client and session, and a second one written with plain httpx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

__all__ = ["mcp_session", "raw_call"]


@asynccontextmanager
async def mcp_session(base: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def raw_call(
    base: str, method: str, params: dict[str, Any], token: str | None = None, timeout: float = 300
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A second MCP client, written from the streamable HTTP transport's specification with
    plain httpx (no SDK): one JSON-RPC request POSTed to /mcp, its answer read from the SSE
    stream the server opens. Returns (notifications before the answer, the answer)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-06-18",
        **({"Authorization": f"Bearer {token}"} if token else {}),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    notes: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{base}/mcp", json=body, headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("id") == 1:
                return notes, message
            notes.append(message)
    raise AssertionError("the stream ended without an answer")
