"""Reading a run over HTTP: an SSE stream of it, the same stream continued after a reconnect
(`Last-Event-ID`), or — for the JSON endpoints — its last event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response

from lestrade.api.base.auth import authorize
from lestrade.api.base.follow import ResourceGone, Snapshot
from lestrade.api.holmes.chats import ClientError
from lestrade.api.holmes.events import Event
from lestrade.api.holmes.runs import RunCursor, follow_run
from lestrade.api.holmes.services import Services
from lestrade.api.holmes.sse import sse_response

__all__ = ["stream", "resume_cursor", "resumed_stream", "last_event", "ClientGone"]


class ClientGone(Exception):
    """The client hung up while waiting; the run goes on without it."""


def stream(svc: Services, cursor: RunCursor) -> Response:
    async def events() -> AsyncIterator[tuple[str, dict[str, Any], Any]]:
        async for event, _ in follow_run(svc.follower, cursor):
            yield event.name, event.data, event.position

    return sse_response(events(), cursor, keepalive=svc.keepalive)


def resume_cursor(request: Request, svc: Services) -> RunCursor | None:
    """The stream a reconnecting client continues (its `Last-Event-ID`), if any. Any replica
    can serve it: the id names the resource and the position in its progress sequence."""
    last = request.headers.get("last-event-id")
    if not last:
        return None
    try:
        return RunCursor.from_event_id(last, svc.namespace)
    except ValueError:
        raise ClientError(400, "Last-Event-ID", f"not an event id this server issued: {last!r}") from None


async def resumed_stream(request: Request, svc: Services) -> Response | None:
    """The rest of the stream a reconnecting client asks for; None for a new request."""
    cursor = resume_cursor(request, svc)
    if cursor is None:
        return None
    refusal = await authorize(request, "get", cursor.plural)
    if refusal:
        raise ClientError(403, "authorization", refusal)
    if await svc.follower.get(cursor.plural, svc.namespace, cursor.name) is None:
        raise ClientError(404, "Last-Event-ID", f"no {cursor.plural} {cursor.name!r} to resume")
    return stream(svc, cursor)


async def last_event(svc: Services, cursor: RunCursor, request: Request, field: str) -> tuple[Event, Snapshot]:
    """Waits for the run (turn) to end and returns its last event. Gives up — the run goes on
    in the cluster — when the client disconnects (Starlette would otherwise keep waiting for
    a reader that is gone) or after `svc.wait_timeout` seconds (a 504 naming the resource)."""

    async def follow() -> tuple[Event, Snapshot]:
        last: tuple[Event, Snapshot] | None = None
        async for item in follow_run(svc.follower, cursor):
            last = item
        assert last is not None
        return last

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    following = asyncio.create_task(follow())
    gone = asyncio.create_task(disconnected())
    try:
        done, _ = await asyncio.wait({following, gone}, timeout=svc.wait_timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (following, gone):
            task.cancel()
    if following in done:
        try:
            return following.result()
        except ResourceGone as exc:
            raise HTTPException(410, f"{field}: {exc}") from exc
    if gone in done:
        raise ClientGone()
    raise HTTPException(
        504,
        f"{field}: {cursor.plural} {cursor.name} is still running after "
        f"{svc.wait_timeout:g}s; it goes on in the cluster (kubectl get {cursor.short} {cursor.name})",
    )
