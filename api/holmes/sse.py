"""SSE responses in HolmesGPT's wire format, with keep-alives no client ever sees.

`event: <name>` / `data: <one JSON object>` / `id: <conv|inv>/<name>/<seq>[.<n>]`, then a
blank line. The documented client (`fetch-event-source`, `JSON.parse(event.data)` in
`onmessage`) dispatches a message on *every* blank line, even one that follows only a comment,
so the usual keep-alive (`: ping` and a blank line) would reach it as a message with empty data
and make `JSON.parse` throw. Our keep-alive is a comment line alone, without the blank line: it
keeps proxies and the socket busy, and parsers fold it into the next real event.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

from lestrade.api.base.follow import ResourceGone
from lestrade.api.holmes.events import error_payload
from lestrade.api.holmes.runs import RunCursor
from lestrade.metrics import sse_stream

__all__ = ["KeepAlive", "sse_response", "KEEPALIVE_SECONDS"]

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0


class KeepAlive(ServerSentEvent):
    """A comment line with no terminating blank line (see the module docstring)."""

    def encode(self) -> bytes:
        return b": keep-alive\n"


def _event(cursor: RunCursor, name: str, data: dict, position: object = None) -> ServerSentEvent:
    return ServerSentEvent(
        data=json.dumps(data, separators=(",", ":"), default=str),
        event=name,
        id=None if position is None else cursor.event_id(position),  # type: ignore[arg-type]
    )


def sse_response(
    events: AsyncIterator[tuple[str, dict, object]],
    cursor: RunCursor,
    keepalive: float = KEEPALIVE_SECONDS,
) -> EventSourceResponse:
    """`events` yields (event name, payload, position or None). A client that disconnects
    only stops its stream: the run goes on in the cluster."""

    async def encoded() -> AsyncIterator[ServerSentEvent]:
        with sse_stream():  # the open-streams gauge
            try:
                async for name, data, position in events:
                    yield _event(cursor, name, data, position)
            except ResourceGone as exc:
                yield _event(cursor, "error", error_payload("Deleted", str(exc)))

    return EventSourceResponse(
        encoded(),
        ping=keepalive,
        ping_message_factory=KeepAlive,
        headers={"Cache-Control": "no-cache"},
    )
