"""Request bodies: a size limit, and JSON whatever the Content-Type says.

The Robusta runner posts its JSON without a Content-Type header and `curl -d` labels it as a
form; HolmesGPT's server reads both as JSON, so POST bodies to `/api/` are read as JSON here
too (the header is rewritten before FastAPI looks at it). Bodies larger than the limit are
refused with 413 whether or not the client announced their length.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestLimits", "BodyTooLarge", "DEFAULT_MAX_BODY"]

DEFAULT_MAX_BODY = 8 * 1024 * 1024
JSON_TYPES = (b"application/json", b"application/merge-patch+json")


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"body: larger than the limit of {limit} bytes")


class RequestLimits:
    def __init__(self, app: ASGIApp, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _reply(send, 413, f"body: larger than the limit of {self.max_body} bytes")
            return
        if scope["path"].startswith("/api/"):
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if kind not in JSON_TYPES:
                rest = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
                scope = {**scope, "headers": [*rest, (b"content-type", b"application/json")]}
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise BodyTooLarge(self.max_body)
            return message

        await self.app(scope, limited, send)


async def _reply(send: Send, status: int, detail: Any) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
