"""Past findings as the API serves them: one `FindingsIndex` over the runs its shared watches
already hold (no list of its own), brought up to date when someone searches (only the runs
whose resourceVersion changed are read again), and searched only in the namespaces where the
caller may `list` that kind (`access.may_as`), as kubectl would show them.

Used by `GET /api/findings` and the MCP tool `search_findings` (`lestrade.api.agents`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from lestrade.api.base.access import may_as
from lestrade.api.base.auth import Verdict
from lestrade.api.base.watch import SharedWatch
from lestrade.resources import CONVERSATION_KIND, CONVERSATION_PLURAL, INVESTIGATION_KIND, INVESTIGATION_PLURAL
from lestrade.runs.history import FindingsIndex, SearchQuery

__all__ = ["Findings"]

FRESH_SECONDS = 1.0
"""A search within this time of the last one uses the index as it is (reading 10,000 runs'
versions costs tens of milliseconds; runs do not finish that often)."""
KINDS = {INVESTIGATION_PLURAL: INVESTIGATION_KIND, CONVERSATION_PLURAL: CONVERSATION_KIND}


class Findings:
    def __init__(self, watches: dict[str, SharedWatch]) -> None:
        self._watches = watches
        self._index = FindingsIndex()
        self._lock = asyncio.Lock()
        self._synced = -FRESH_SECONDS

    def _objects(self) -> Iterator[dict[str, Any]]:
        for plural, kind in KINDS.items():
            watch = self._watches.get(plural)
            for obj in list(watch.objects.values()) if watch is not None else []:
                yield obj if obj.get("kind") else {"kind": kind, **obj}

    async def refresh(self) -> int:
        """Brings the index up to date. The work runs in a thread (the first time it reads
        every run: seconds with 10,000), on a snapshot of the watches' current objects, which
        the watches replace but never change in place."""
        async with self._lock:
            if time.monotonic() - self._synced < FRESH_SECONDS:
                return 0
            snapshot = list(self._objects())
            changed = await asyncio.to_thread(self._index.sync, snapshot)
            self._synced = time.monotonic()
            return changed

    async def search(self, app: object, verdict: Verdict | None, query: SearchQuery) -> list[dict[str, Any]]:
        """The findings the caller may read (`list` of that kind in that namespace), best first."""
        await self.refresh()
        plurals = {kind: plural for plural, kind in KINDS.items()}
        readable = [
            (kind, ns) for kind, ns in self._index.namespaces() if await may_as(app, verdict, "list", plurals[kind], ns)
        ]
        async with self._lock:  # one connection: never used by two threads at once
            return await asyncio.to_thread(self._index.search, query, None, None, readable=readable)
