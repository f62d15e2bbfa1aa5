"""Context store benchmark (`/v1`, reference 004): append throughput, contention, reads of a
long log.

    .venv/bin/python bench/contexts_bench.py [--quick] [--messages 10000]

Two API processes (`python -m lestrade.api`) against a local control plane. Prints:

1. appends per second from one client, one after another (each is a read of the context and
   one conditional ConfigMap write);
2. 50 concurrent appends split over the two processes: wall time and how many retries the
   optimistic concurrency cost (appends numbered 1..50 either way);
3. with N messages in the log (written in bulk with the product's `Transcript`): p50/p99 of
   `GET /tail?limit=100` and of `GET /context` (both read and decode the whole transcript).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "operator"))
sys.path.insert(0, str(HERE))

import httpx  # noqa: E402
from api_bench import ApiProcess  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from operator_bench import ModelServerProcess, new_namespace  # noqa: E402
from opkit import write_model_list  # noqa: E402

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)
from lestrade.kube import Kube  # noqa: E402
from lestrade.localcluster import LocalCluster  # noqa: E402
from lestrade.modelserver import Scenario, Step  # noqa: E402
from lestrade.resources.install import install_crds  # noqa: E402
from lestrade.runs.records import MessageRecord
from lestrade.runs.transcript import RecordType, Transcript  # noqa: E402
from lestrade.runs.views import ConversationView  # noqa: E402


def _message(text: str) -> dict:
    return {"message": {"role": "user", "parts": [{"type": "text", "text": text}]}}


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _bulk(cluster: LocalCluster, namespace: str, name: str, count: int) -> None:
    with cluster.api_client() as client:
        kube = Kube(client)
        try:
            obj = await kube.get(f"/apis/lestrade.dev/v1alpha1/namespaces/{namespace}/conversations/{name}")
            transcript = Transcript(kube, namespace, ConversationView(obj).ref.owner)
            for i in range(count):
                role = "user" if i % 2 == 0 else "assistant"
                text = f"message {i} " + "lorem ipsum " * 8
                transcript.append(
                    MessageRecord(
                        t=RecordType.MESSAGE,
                        message={"role": role, "content": text},
                        context={
                            "role": role,
                            "parts": [{"type": "text", "text": text}],
                            "tokenCount": 30,
                            "metadata": {},
                            "insertedAt": "2025-01-24T12:00:00Z",
                        },
                    )
                )
            await transcript.sync()
        finally:
            await kube.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke test)")
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lestrade-contexts-bench-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    server = ModelServerProcess([Scenario(name="bench-instant", steps=[Step(content="ok")])], tmp)
    cluster = LocalCluster.start()
    apis: list[ApiProcess] = []
    try:
        admin = cluster.api_client()
        install_crds(admin, wait=True, timeout=60)
        namespace = new_namespace(admin, f"contexts-bench-{uuid.uuid4().hex[:6]}")
        models = write_model_list(tmp / "models.yaml", server, "bench-instant")
        apis = [ApiProcess(cluster, namespace, models, tmp / f"api-{i}.log") for i in range(2)]
        a, b = (api.base for api in apis)

        httpx.put(f"{a}/v1/contexts/seq", json={}, timeout=60).raise_for_status()
        count = 50 if args.quick else 300
        started = time.perf_counter()
        for i in range(count):
            httpx.post(f"{a}/v1/contexts/seq/messages", json=_message(f"m{i}"), timeout=60).raise_for_status()
        print(f"appends, one client in sequence: {count / (time.perf_counter() - started):.0f}/s ({count} appends)")

        httpx.put(f"{a}/v1/contexts/busy", json={}, timeout=60).raise_for_status()
        started = time.perf_counter()
        with ThreadPoolExecutor(50) as pool:
            answers = list(
                pool.map(
                    lambda i: httpx.post(
                        f"{(a, b)[i % 2]}/v1/contexts/busy/messages", json=_message(f"c{i}"), timeout=120
                    ),
                    range(50),
                )
            )
        wall = time.perf_counter() - started
        seqs = sorted(r.json()["seq"] for r in answers)
        assert seqs == list(range(1, 51)), seqs
        print(f"50 concurrent appends over 2 processes: {wall:.2f} s wall, numbered 1..50")

        httpx.put(
            f"{a}/v1/contexts/long",
            json={"policy": {"strategy": "last_n", "config": {"limit": 100}}, "token_budget": 20_000},
            timeout=60,
        ).raise_for_status()
        messages = 1_000 if args.quick else args.messages
        started = time.perf_counter()
        asyncio.run(_bulk(cluster, namespace, "long", messages))
        print(f"bulk write of {messages} messages with Transcript: {time.perf_counter() - started:.2f} s")
        for path in ("tail?limit=100", "tail?offset=5000&limit=100", "context"):
            samples = []
            for _ in range(10 if args.quick else 30):
                t0 = time.perf_counter()
                httpx.get(f"{b}/v1/contexts/long/{path}", timeout=60).raise_for_status()
                samples.append((time.perf_counter() - t0) * 1000)
            print(
                f"GET {path} with {messages} messages: p50 {statistics.median(samples):.0f} ms, "
                f"p99 {_pct(samples, 0.99):.0f} ms"
            )
        k8s.CoreV1Api(admin).delete_namespace(namespace)
    finally:
        for api in apis:
            api.stop()
        cluster.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
