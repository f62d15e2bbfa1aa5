"""Talking to one MCP server with the official `mcp` SDK: list its tools, call one.

Every operation opens its own short session (connect, initialize, one request, close). A
session shared between runs would have to be owned by one task (the SDK's transports are
anyio task groups) and would carry a dead server's broken state into every later call; a
session per operation has no state to go stale, so "reconnecting" is simply the next call,
and a server that hangs or dies harms only the call in flight. The price is one
`initialize` round trip per call.

Everything the server sends is hostile: the whole operation has a deadline, the HTTP answers
are cut off past `MAX_RESPONSE_BYTES` (the SDK would read any size into memory), and failures
become one short line (`McpFailure`) for the model and the status, never a traceback.
The SDK (and httpx under it) is imported on first use: an operator without MCP servers never
pays for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ServerConfig", "McpFailure", "Discovery", "discover", "call_tool", "MAX_RESPONSE_BYTES", "short_error"]

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""One HTTP answer of a server larger than this ends the operation (memory stays bounded)."""

MAX_LIST_PAGES = 20
_CLIENT_NAME = "lestrade"


@dataclass(frozen=True)
class ServerConfig:
    """How to reach a server. `headers` hold credentials: never log, show or store them."""

    url: str
    transport: str = "StreamableHTTP"  # or "SSE"
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    connect_timeout: float = 10.0
    call_timeout: float = 30.0
    max_response_bytes: int = MAX_RESPONSE_BYTES


class McpFailure(Exception):
    """The operation failed; the message is one line fit for the model and the status."""


@dataclass(frozen=True)
class Discovery:
    server: str  # "name version", as the server claims
    tools: list[Any]  # mcp.types.Tool (validated by the SDK's models, still hostile content)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def short_error(exc: BaseException, limit: int = 300) -> str:
    """The innermost cause of a failure (task groups nest them), as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    from pydantic import ValidationError

    if isinstance(exc, McpFailure):
        text = str(exc)
    elif isinstance(exc, ValidationError):
        # Its text quotes what the server sent; the URL may be any internal service.
        text = "ValidationError: the answer does not match the MCP schema"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = _CONTROL.sub(" ", text).replace("\n", " ").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _http_client_factory(config: ServerConfig, overflow: Any = None) -> Any:
    import httpx

    class _CappedStream(httpx.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def __aiter__(self):  # type: ignore[override]
            seen = 0
            async for chunk in self._inner:
                seen += len(chunk)
                if seen > config.max_response_bytes:
                    failure = McpFailure(f"the server's answer exceeded {config.max_response_bytes} bytes")
                    if overflow is not None:
                        overflow(failure)  # the SDK swallows stream errors: tell the session
                    raise failure
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class _CappedTransport(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            response = await self._inner.handle_async_request(request)
            return httpx.Response(
                status_code=response.status_code,
                headers=response.headers,
                stream=_CappedStream(response.stream),
                extensions=response.extensions,
            )

        async def aclose(self) -> None:
            await self._inner.aclose()

    def factory(headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None) -> Any:
        return httpx.AsyncClient(
            headers=headers,
            auth=auth,
            transport=_CappedTransport(),
            follow_redirects=False,
            timeout=timeout or httpx.Timeout(config.connect_timeout, read=config.call_timeout),
        )

    return factory


class _Session:
    """`async with _Session(config) as session`: an initialized ClientSession."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._stack: Any = None
        self.server = ""
        self.failure: Exception | None = None
        self.broken = asyncio.Event()

    async def _incoming(self, message: Any) -> None:
        """The SDK hands undecodable answers here and then waits for the real one forever
        (until the timeout): remember it, so the waiting request can be failed at once."""
        if isinstance(message, Exception):
            self.failure = message
            self.broken.set()

    def _overflow(self, failure: McpFailure) -> None:
        self.failure = failure
        self.broken.set()

    async def race(self, work: Any) -> Any:
        """`await work` unless the server sends something undecodable first."""
        task = asyncio.ensure_future(work)
        broken = asyncio.ensure_future(self.broken.wait())
        try:
            await asyncio.wait({task, broken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            broken.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled() or not task.done():
            if isinstance(self.failure, McpFailure):
                raise self.failure
            # Only the kind of error, never its text: a decoding error quotes the body, and
            # the URL may point at any internal service (status would become a read primitive).
            kind = type(self.failure).__name__ if self.failure is not None else "garbage"
            raise McpFailure(f"the server answered with something that is not MCP ({kind})")
        return task.result()

    async def __aenter__(self) -> Any:
        import contextlib
        from datetime import timedelta

        import httpx
        from mcp import ClientSession
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.types import Implementation

        # The SDK logs a traceback for every undecodable answer; the failure reaches the
        # caller (and the status) as one line instead.
        logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
        config = self.config
        factory = _http_client_factory(config, self._overflow)
        timeout = httpx.Timeout(config.connect_timeout, read=max(config.call_timeout, config.connect_timeout))
        self._stack = contextlib.AsyncExitStack()
        try:
            if config.transport == "SSE":
                read, write = await self._stack.enter_async_context(
                    sse_client(
                        config.url,
                        headers=dict(config.headers),
                        timeout=config.connect_timeout,
                        sse_read_timeout=max(config.call_timeout, config.connect_timeout),
                        httpx_client_factory=factory,
                    )
                )
            else:
                client = await self._stack.enter_async_context(factory(dict(config.headers), timeout))
                read, write, _ = await self._stack.enter_async_context(
                    streamable_http_client(config.url, http_client=client)
                )
            session = await self._stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=timedelta(seconds=config.connect_timeout),
                    client_info=Implementation(name=_CLIENT_NAME, version="1"),
                    message_handler=self._incoming,
                )
            )
            init = await self.race(session.initialize())
            info = init.serverInfo
            self.server = f"{info.name} {info.version}".strip()[:128]
            return session
        except BaseException:
            await self._stack.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)


async def _bounded(config: ServerConfig, seconds: float, what: str, work: Any) -> tuple[str, Any]:
    """Runs `work(session)` in a fresh session within `seconds`: (the server's name and
    version, the result). Whatever goes wrong becomes an McpFailure; cancellation passes."""
    wrapper = _Session(config)
    try:
        async with asyncio.timeout(seconds):
            async with wrapper as session:
                return wrapper.server, await wrapper.race(work(session))
    except TimeoutError:
        raise McpFailure(f"{what}: no answer from the MCP server within {seconds:g}s") from None
    except McpFailure as exc:
        raise McpFailure(f"{what}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - anything a broken server causes, said in one line
        text = short_error(exc)
        if "Timed out while waiting for response" in text:
            text = "no answer from the MCP server in time (it hung, or died during the call)"
        raise McpFailure(f"{what}: {text}") from None


async def discover(config: ServerConfig) -> Discovery:
    """Connects, initializes and lists every tool (paged, at most MAX_LIST_PAGES pages)."""
    from mcp import types

    async def work(session: Any) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        for _ in range(MAX_LIST_PAGES):
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        return tools

    server, tools = await _bounded(config, config.connect_timeout * 2, "listing tools", work)
    return Discovery(server=server, tools=tools)


async def call_tool(config: ServerConfig, tool: str, arguments: dict[str, Any]) -> Any:
    """One tools/call in its own session; returns mcp.types.CallToolResult (hostile content)."""
    from datetime import timedelta

    from mcp import types

    async def work(session: Any) -> Any:
        # send_request, not session.call_tool: that one lists every tool again to validate
        # structured output, a second round trip (and a second answer to distrust) per call.
        request = types.ClientRequest(
            types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
        )
        return await session.send_request(
            request, types.CallToolResult, request_read_timeout_seconds=timedelta(seconds=config.call_timeout)
        )

    _, result = await _bounded(config, config.connect_timeout + config.call_timeout, f"calling {tool}", work)
    return result
