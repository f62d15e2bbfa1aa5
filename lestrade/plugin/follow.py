"""Following a run live: the resource watched, its transcript read on every change, the new
items handed to the caller, until the run (or the Conversation turn) ends.

Nothing is kept between connections but the last seq shown, so a dropped connection — a watch
the apiserver ends, a network failure, an apiserver restart — only means reading the object
and its transcript again and going on after that seq: nothing is shown twice or skipped.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from lestrade.kube import ApiException, is_not_found, resource_path
from lestrade.plugin.session import Session
from lestrade.resources import CONVERSATION_KIND
from lestrade.resources.common import FINISHED_PHASES
from lestrade.runs.summary import timeline, turn_start
from lestrade.runs.transcript import Transcript, TranscriptState
from lestrade.runs.views import view_of

__all__ = ["Outcome", "Gone", "follow", "turn_phase", "WATCH_SECONDS"]

WATCH_SECONDS = int(os.environ.get("LESTRADE_PLUGIN_WATCH_SECONDS", "60"))
"""How long one watch lasts before the plugin reads everything again (a cheap resync; tests
make it short to exercise the reconnect path)."""
RETRY_SECONDS = 1.0


class Gone(Exception):
    """The followed resource was deleted."""


@dataclass
class Outcome:
    object: dict[str, Any]
    state: TranscriptState
    phase: str
    """Succeeded, Answered, Failed or AwaitingApproval (when asked to stop there)."""


def turn_phase(obj: dict[str, Any], turn: int | None) -> str:
    """The phase of the run, or of one Conversation turn (the last when `turn` is None)."""
    status = obj.get("status") or {}
    if obj.get("kind") != CONVERSATION_KIND:
        return str(status.get("phase") or "Pending")
    turns = status.get("turns") or []
    asks = (obj.get("spec") or {}).get("turns") or []
    index = len(asks) - 1 if turn is None else turn
    if index < 0 or index >= len(turns):
        return "Pending"
    return str(turns[index].get("phase") or "Pending")


async def follow(
    session: Session,
    plural: str,
    name: str,
    show: Callable[[dict[str, Any]], None],
    *,
    turn: int | None = None,
    after: int = -1,
    stop_at_approval: bool = False,
    on_waiting: Callable[[dict[str, Any]], None] | None = None,
) -> Outcome:
    """Shows every timeline item after seq `after` (of `turn`, for a Conversation) as it is
    stored, and returns when the run or turn ended (or waits for approval, with
    `stop_at_approval`). `on_waiting` is called once each time the run starts waiting."""
    path = resource_path(plural, session.namespace)
    announced: str | None = None
    shown = after

    async def catch_up(obj: dict[str, Any]) -> Outcome | None:
        nonlocal shown, announced
        state = await Transcript(
            session.kube, session.namespace, view_of(obj).ref.owner, requester=view_of(obj).ref.requester
        ).load()
        since = turn_start(state, turn) if obj.get("kind") == CONVERSATION_KIND else 0
        for item in timeline(state, since):
            if item["seq"] > shown:
                show(item)
                shown = item["seq"]
        phase = turn_phase(obj, turn)
        if phase in FINISHED_PHASES:
            return Outcome(obj, state, phase)
        if phase == "AwaitingApproval":
            key = ",".join(p["toolCallId"] for p in (obj.get("status") or {}).get("pendingApprovals") or [])
            if stop_at_approval:
                return Outcome(obj, state, phase)
            if on_waiting and key and key != announced:
                announced = key
                on_waiting(obj)
        return None

    while True:
        try:
            try:
                obj = await session.kube.get(f"{path}/{name}")
            except ApiException as exc:
                if is_not_found(exc):
                    raise Gone(f"{plural}/{name} is gone from namespace {session.namespace}") from exc
                raise
            done = await catch_up(obj)
            if done:
                return done
            version = obj["metadata"]["resourceVersion"]
            async for event in session.kube.watch(
                path,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                fieldSelector=f"metadata.name={name}",
            ):
                kind = event.get("type")
                if kind == "ERROR":
                    break  # too old: read again
                if kind == "DELETED":
                    raise Gone(f"{plural}/{name} was deleted")
                if kind in ("ADDED", "MODIFIED"):
                    done = await catch_up(event["object"])
                    if done:
                        return done
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            print(
                f"lestrade: connection lost ({type(exc).__name__}); resuming after item {shown}",
                file=sys.stderr,
                flush=True,
            )
            await asyncio.sleep(RETRY_SECONDS)
        except ApiException as exc:
            if exc.status not in (429, 500, 502, 503, 504):
                raise
            print(
                f"lestrade: the apiserver answered {exc.status}; resuming after item {shown}",
                file=sys.stderr,
                flush=True,
            )
            await asyncio.sleep(RETRY_SECONDS)
