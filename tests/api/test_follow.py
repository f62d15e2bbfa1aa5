"""The transcript behind many streams is read once per version of its resource, and a reader
that goes away does not cancel the read for the others (real apiserver, counted requests)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import aiohttp

from lestrade.api.base.follow import TranscriptCache
from lestrade.kube import Kube, resource_path
from lestrade.runs.records import TurnRecord
from lestrade.runs.transcript import RecordType, Transcript


async def test_one_transcript_read_per_version_for_many_readers(cluster: Any, crds: None, namespace: str) -> None:
    reads: list[str] = []

    async def on_request_start(session: Any, context: Any, params: Any) -> None:
        if params.url.path.endswith("/configmaps") and params.method == "GET":
            reads.append(str(params.url))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_request_start)
    with cluster.api_client() as api:
        kube = Kube(api, session_factory=functools.partial(aiohttp.ClientSession, trace_configs=[trace]))
        try:
            obj = await kube.create(
                resource_path("conversations", namespace),
                {
                    "apiVersion": "lestrade.dev/v1alpha1",
                    "kind": "Conversation",
                    "metadata": {"name": "shared"},
                    "spec": {"turns": [{"ask": "hi"}]},
                },
            )
            owner = {
                "apiVersion": "lestrade.dev/v1alpha1",
                "kind": "Conversation",
                "name": "shared",
                "uid": obj["metadata"]["uid"],
            }
            writer = Transcript(kube, namespace, owner)
            writer.append_message({"role": "system", "content": "sys"})
            await writer.sync()
            cache = TranscriptCache(kube)

            states = await asyncio.gather(*(cache.get(obj) for _ in range(50)))
            assert len(reads) == 1 and all(s is states[0] for s in states)
            assert [r["t"] for r in states[0].records] == ["message"]

            # A new version: read once more; a reader cancelled mid-read does not hurt the rest.
            writer.append(TurnRecord(t=RecordType.TURN, index=0))
            await writer.sync()
            newer = await kube.patch(
                resource_path("conversations", namespace, "shared") + "/status", {"status": {"version": 1}}
            )
            first = asyncio.create_task(cache.get(newer))
            others = [asyncio.create_task(cache.get(newer)) for _ in range(10)]
            await asyncio.sleep(0)
            first.cancel()
            results = await asyncio.gather(*others)
            assert len(reads) == 2 and all(len(s.records) == 2 for s in results)
            assert len((await cache.get(newer)).records) == 2 and len(reads) == 2
        finally:
            await kube.aclose()
