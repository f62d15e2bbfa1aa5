"""With authentication off (`make run`), the API must not be a door for web pages.

A page the developer visits can POST to `http://127.0.0.1:PORT` (a "simple" cross-site request:
`text/plain` or a form, no preflight) and so start runs with the API's identity — under
`make run` the admin's. With DNS rebinding it can read the answers too (its own host name
resolving to 127.0.0.1). So, when no token is asked for:
- the Host header must name a loopback host (`localhost`, `*.localhost`, `127.0.0.1`, `[::1]`),
  which a rebound name is not;
- an Origin header, which browsers send on cross-site requests, must be such a host too;
- a body must be `application/json` (which a page cannot send cross-site without a CORS
  preflight that this API never answers).
With authentication on, a token is needed, which a page does not have; nothing here applies.
Nor does it to requests that carry their own credential, which a page cannot forge: Slack's
signed callbacks (form bodies, through a tunnel's host name) and signed decision links.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LocalOnly", "loopback_host"]

_JSON_TYPES = (b"application/json", b"application/merge-patch+json")
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_SIGNED_PATHS = frozenset({"/api/slack/interactions"})  # Slack's signature (api/slack)
_SIGNED_PREFIXES = ("/api/delivery/decisions/",)  # the link is signed (api/decisions)


def loopback_host(host: str) -> bool:
    """`host` (a Host header or an Origin's netloc, with or without a port) names this machine."""
    name = urlsplit(f"//{host}").hostname or ""
    name = name.rstrip(".").lower()
    return (
        name in _LOOPBACK
        or name.endswith(".localhost")
        or (name.startswith("127.") and name.count(".") == 3 and name.replace(".", "").isdigit())
    )


class LocalOnly:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _SIGNED_PATHS or scope["path"].startswith(_SIGNED_PREFIXES):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if not loopback_host(host):
            await _refuse(
                send,
                403,
                "Host",
                f"{host!r} is not a loopback name; with authentication off the "
                "API answers only http://127.0.0.1 or http://localhost (DNS rebinding)",
                path=scope["path"],
            )
            return
        origin = headers.get(b"origin")
        if origin is not None:
            parsed = urlsplit(origin.decode("latin-1"))
            if parsed.scheme not in ("http", "https") or not loopback_host(parsed.netloc):
                await _refuse(
                    send,
                    403,
                    "Origin",
                    f"{origin.decode('latin-1')!r}: with authentication off "
                    "the API refuses requests from web pages of other sites",
                    path=scope["path"],
                )
                return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if kind not in _JSON_TYPES:
                await _refuse(
                    send,
                    415,
                    "Content-Type",
                    "with authentication off, request bodies must be sent "
                    "as 'Content-Type: application/json' (curl: -H 'Content-Type: application/json')",
                    path=scope["path"],
                )
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, field: str, message: str, path: str = "") -> None:
    """The refusal in the error shape of the API the path belongs to: reference 004's `{error,
    message}` under /v1, 003's `{error}` for /chat, `{detail}` (FastAPI's) elsewhere."""
    text = f"{field}: {message}"
    if path.startswith("/v1/"):
        code = "unsupported_media_type" if status == 415 else "forbidden"
        payload: dict[str, str] = {"error": code, "message": text}
    elif path == "/chat" or path.startswith("/chat/"):
        payload = {"error": text}
    else:
        payload = {"detail": text}
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
