"""The context store under load: concurrent appends through two API *processes* (no lost,
duplicated or misnumbered message; every `if_version` 409 right), and a 10,000-message log
paged with `tail`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from lestrade.kube import Kube
from lestrade.localcluster.cluster import free_port
from lestrade.localcluster.processes import wait_until
from lestrade.runs.records import MessageRecord
from lestrade.runs.transcript import RecordType, Transcript
from lestrade.runs.views import ConversationView


def _live(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health/live", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def two_apis(cluster: Any, crds: None, namespace: str, tmp_path: Path) -> Iterator[list[str]]:
    """Two `python -m lestrade.api` processes serving the namespace."""
    procs: list[subprocess.Popen[bytes]] = []
    bases: list[str] = []
    try:
        for index in range(2):
            port = free_port()
            env = {
                **os.environ,
                "KUBECONFIG": str(cluster.kubeconfig),
                "LESTRADE_API_AUTH": "false",
                "LESTRADE_API_PORT": str(port),
                "LESTRADE_NAMESPACE": namespace,
            }
            log = open(tmp_path / f"api-{index}.log", "ab")  # noqa: SIM115 - closed below
            procs.append(
                subprocess.Popen([sys.executable, "-m", "lestrade.api"], env=env, stdout=log, stderr=subprocess.STDOUT)
            )
            log.close()
            bases.append(f"http://127.0.0.1:{port}")
        for base in bases:
            wait_until(f"the API at {base}", lambda base=base: _live(base), 60)
        yield bases
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


def _append(base: str, cid: str, text: str, if_version: int | None = None) -> httpx.Response:
    body: dict[str, Any] = {"message": {"role": "user", "parts": [{"type": "text", "text": text}]}}
    if if_version is not None:
        body["if_version"] = if_version
    return httpx.post(f"{base}/v1/contexts/{cid}/messages", json=body, timeout=120)


def _log(base: str, cid: str) -> list[dict[str, Any]]:
    return httpx.get(f"{base}/v1/contexts/{cid}/tail?limit=1000", timeout=60).json()["messages"]


def test_fifty_concurrent_appends_through_two_processes(two_apis: list[str]) -> None:
    a, b = two_apis
    assert httpx.put(f"{a}/v1/contexts/busy", json={}, timeout=60).status_code == 200
    texts = [f"message {i}" for i in range(50)]
    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda i: _append(two_apis[i % 2], "busy", texts[i]), range(50)))
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200]
    bodies = [r.json() for r in answers]
    assert sorted(x["seq"] for x in bodies) == list(range(1, 51))  # no gap, no duplicate
    assert sorted(x["version"] for x in bodies) == list(range(1, 51))
    log = _log(b, "busy")
    assert [m["seq"] for m in log] == list(range(1, 51))
    assert sorted(m["parts"][0]["text"] for m in log) == sorted(texts)  # none lost
    by_text = {m["parts"][0]["text"]: m["seq"] for m in log}
    assert all(by_text[texts[i]] == bodies[i]["seq"] for i in range(50))  # each answer told the truth


def test_fifty_concurrent_appends_with_if_version(two_apis: list[str]) -> None:
    a, b = two_apis
    assert httpx.put(f"{a}/v1/contexts/guarded", json={}, timeout=60).status_code == 200
    # One round, everyone with the same version: exactly one wins, 49 get the documented 409.
    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda i: _append(two_apis[i % 2], "guarded", f"race {i}", 0), range(50)))
    won = [r for r in answers if r.status_code == 200]
    lost = [r for r in answers if r.status_code != 200]
    assert len(won) == 1 and won[0].json() == {
        "seq": 1,
        "version": 1,
        "token_estimate": won[0].json()["token_estimate"],
    }
    assert all(r.status_code == 409 for r in lost)
    assert all(
        r.json() == {"error": "conflict", "message": "Context version changed (expected 0, found 1)"} for r in lost
    )
    # The documented retry pattern: read the version, append with it, on 409 read again — 5
    # writers with 10 messages each (50 appends; 50 writers would cost 50² round trips).
    conflicts: list[dict[str, Any]] = []

    def writer(w: int) -> list[int]:
        base, seqs = two_apis[w % 2], []
        for k in range(10):
            while True:
                version = httpx.get(f"{base}/v1/contexts/guarded", timeout=60).json()["version"]
                answer = _append(base, "guarded", f"retry {w}.{k}", version)
                if answer.status_code == 200:
                    assert answer.json()["version"] == version + 1
                    seqs.append(int(answer.json()["seq"]))
                    break
                assert answer.status_code == 409, answer.text
                conflicts.append(answer.json())
        return seqs

    with ThreadPoolExecutor(5) as pool:
        seqs = [seq for batch in pool.map(writer, range(5)) for seq in batch]
    assert sorted(seqs) == list(range(2, 52))
    log = _log(b, "guarded")
    assert [m["seq"] for m in log] == list(range(1, 52))
    assert sorted(m["parts"][0]["text"] for m in log[1:]) == sorted(
        f"retry {w}.{k}" for w in range(5) for k in range(10)
    )
    for conflict in conflicts:  # every 409 names a version that really had moved on
        assert conflict["error"] == "conflict"
        expected, found = (
            int(x)
            for x in conflict["message"]
            .removeprefix("Context version changed (expected ")
            .removesuffix(")")
            .split(", found ")
        )
        assert found > expected


def test_ten_thousand_messages_paged_with_tail(stack: Any, scenario_name: str, namespace: str, cluster: Any) -> None:
    s = stack(scenario_name, operator=False)
    total = 10_000
    with s.client(timeout=120) as http:
        assert http.put("/v1/contexts/long", json={"policy": {"strategy": "manual"}}).status_code == 200

        async def bulk() -> None:
            # Written the way the operator writes a transcript (few large writes), with the
            # records an append through /v1 makes: far faster than 10,000 requests.
            with cluster.api_client() as client:
                kube = Kube(client)
                try:
                    obj = await kube.get(f"/apis/lestrade.dev/v1alpha1/namespaces/{namespace}/conversations/long")
                    transcript = Transcript(kube, namespace, ConversationView(obj).ref.owner)
                    for i in range(1, total + 1):
                        role = "user" if i % 2 else "assistant"
                        transcript.append(
                            MessageRecord(
                                t=RecordType.MESSAGE,
                                message={"role": role, "content": f"m{i}"},
                                context={
                                    "role": role,
                                    "parts": [{"type": "text", "text": f"m{i}"}],
                                    "tokenCount": 3,
                                    "metadata": {},
                                    "insertedAt": "2025-01-24T12:00:00Z",
                                },
                            )
                        )
                    await transcript.sync()
                finally:
                    await kube.aclose()

        asyncio.run(bulk())
        assert http.get("/v1/contexts/long").json()["version"] == total
        seen: list[int] = []
        offset, limit = 0, 500
        while True:
            page = http.get(f"/v1/contexts/long/tail?offset={offset}&limit={limit}").json()["messages"]
            if not page:
                break
            seqs = [m["seq"] for m in page]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # chronological in a page
            assert seqs[-1] == total - offset
            assert all(m["parts"][0]["text"] == f"m{m['seq']}" for m in page)
            seen = seqs + seen
            offset += len(page)
        assert seen == list(range(1, total + 1))
        after = http.post(
            "/v1/contexts/long/messages",
            json={
                "message": {"role": "user", "parts": [{"type": "text", "text": "one more"}]},
                "if_version": total,
            },
        )
        assert after.status_code == 200, after.text
        assert after.json()["seq"] == total + 1
        assert http.get("/v1/contexts/long/tail?limit=1").json()["messages"][0]["parts"][0]["text"] == "one more"


def test_concurrent_appends_across_chunk_boundaries(cluster: Any, crds: None, namespace: str, api_client: Any) -> None:
    """Small chunks and records of different sizes: when one writer starts a new chunk while
    another's smaller record would still fit the old one, neither record is lost (the full
    chunk is sealed first)."""
    from apikit import serve
    from kubernetes import client as k8s

    from lestrade.api.app import create_app
    from lestrade.runs.transcript import TRANSCRIPT_LABEL

    with cluster.api_client() as one, cluster.api_client() as two:
        apps = [create_app(one, namespace=namespace), create_app(two, namespace=namespace)]
        for app in apps:
            app.state.contexts.chunk_limit = 6000
        with serve(apps[0]) as a, serve(apps[1]) as b:
            assert httpx.put(f"{a}/v1/contexts/chunky", json={}, timeout=60).status_code == 200
            texts = [f"{i}:" + "x" * (100 + (i * 397) % 1500) for i in range(50)]
            with ThreadPoolExecutor(50) as pool:
                answers = list(pool.map(lambda i: _append((a, b)[i % 2], "chunky", texts[i]), range(50)))
            assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200]
            assert sorted(r.json()["seq"] for r in answers) == list(range(1, 51))
            log = _log(a, "chunky")
            assert [m["seq"] for m in log] == list(range(1, 51))
            assert sorted(m["parts"][0]["text"] for m in log) == sorted(texts)
    uid = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "conversations", "chunky"
    )["metadata"]["uid"]
    chunks = (
        k8s.CoreV1Api(api_client)
        .list_namespaced_config_map(namespace, label_selector=f"{TRANSCRIPT_LABEL}={uid}")
        .items
    )
    assert len(chunks) >= 5  # ~40 KB of records in 6 KB chunks
    assert all(
        "sealed" in (c.data or {})
        for c in sorted(chunks, key=lambda c: int(c.metadata.labels["lestrade.dev/transcript-chunk"]))[:-1]
    )
