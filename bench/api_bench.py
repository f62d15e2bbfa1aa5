"""API benchmark: SSE latency with many open streams, memory per stream, requests per second.

    .venv/bin/python bench/api_bench.py [--quick] [--streams 100]

The API runs as its own process (`python -m lestrade.api`) against a local control plane.
Prints:

1. SSE event latency, record and status written -> client received, p50/p99, with N
   concurrent streams (target p99 <= 100 ms): this process plays the operator — it appends a
   record to a Conversation's transcript with the product's `Transcript` and then patches its
   status — and N SSE clients (httpx-sse) attached to that Conversation time the event's
   arrival from just before the record is written (so the transcript write counts too);
2. memory per open stream: the API's RSS with N idle streams open minus before, divided by N
   (target <= 64 KiB);
3. requests per second for `/api/model`, and for `/api/chat` end to end with an instant
   scripted model and the real operator (a process of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "operator"))
sys.path.insert(0, str(HERE))

import httpx  # noqa: E402
from httpx_sse import aconnect_sse  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from operator_bench import ModelServerProcess, new_namespace  # noqa: E402
from opkit import OperatorProcess, write_model_list  # noqa: E402

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)
from lestrade.kube import Kube, resource_path  # noqa: E402
from lestrade.localcluster import LocalCluster  # noqa: E402
from lestrade.localcluster.cluster import free_port  # noqa: E402
from lestrade.modelserver import Scenario, Step  # noqa: E402
from lestrade.resources.install import install_crds  # noqa: E402
from lestrade.runs.records import AnswerRecord, TokensRecord, TurnRecord
from lestrade.runs.transcript import RecordType, Transcript  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class ApiProcess:
    def __init__(self, cluster: LocalCluster, namespace: str, models: Path, log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "LESTRADE_NAMESPACE": namespace,
            "LESTRADE_MODEL_LIST": str(models),
            "LESTRADE_API_PORT": str(self.port),
            "LESTRADE_API_AUTH": "false",
        }
        handle = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "lestrade.api"], env=env, stdout=handle, stderr=handle)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.base}/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the API did not start; see {log}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def sse_latency(api: ApiProcess, cluster: LocalCluster, namespace: str, streams: int, rounds: int) -> None:
    kube = Kube(cluster.api_client())
    name = f"bench-{uuid.uuid4().hex[:6]}"
    obj = await kube.create(
        resource_path("conversations", namespace),
        {
            "apiVersion": "lestrade.dev/v1alpha1",
            "kind": "Conversation",
            "metadata": {"name": name},
            "spec": {"turns": [{"ask": "benchmark"}]},
        },
    )
    owner = {"apiVersion": "lestrade.dev/v1alpha1", "kind": "Conversation", "name": name, "uid": obj["metadata"]["uid"]}
    transcript = Transcript(kube, namespace, owner)
    transcript.append_message({"role": "system", "content": "sys"})
    transcript.append(TurnRecord(t=RecordType.TURN, index=0))
    transcript.append_message({"role": "user", "content": "benchmark"})
    await transcript.sync()
    status_path = resource_path("conversations", namespace, name) + "/status"
    await kube.patch(status_path, {"status": {"version": 2}})

    sent: dict[str, float] = {}
    received: list[float] = []
    connected = 0
    wave = streams // 2
    waves = [asyncio.Event(), asyncio.Event()]
    rss: list[int] = []

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal connected
        async with aconnect_sse(
            http, "POST", "/api/chat", json={"ask": "x", "stream": True}, headers={"Last-Event-ID": f"conv/{name}/2"}
        ) as source:
            assert source.response.status_code == 200
            connected += 1
            if connected == wave:
                waves[0].set()
            if connected == streams:
                waves[1].set()
            async for event in source.aiter_sse():
                if event.id in sent:
                    received.append(time.perf_counter() - sent[event.id])
                if event.event == "ai_answer_end":
                    return

    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(base_url=api.base, timeout=120, limits=limits) as http:
        # Two waves, RSS measured after each: the difference is what the second wave's
        # streams cost, without the one-time cost of the first stream ever served.
        tasks = [asyncio.create_task(client(http)) for _ in range(wave)]
        await asyncio.wait_for(waves[0].wait(), 60)
        await asyncio.sleep(1.0)  # the streams are idle now: every follower is subscribed
        rss.append(rss_kib(api.proc.pid))
        tasks += [asyncio.create_task(client(http)) for _ in range(streams - wave)]
        await asyncio.wait_for(waves[1].wait(), 60)
        await asyncio.sleep(1.0)
        rss.append(rss_kib(api.proc.pid))
        for n in range(rounds):
            # The clock starts before the record is stored: a stream may pick the record up
            # with the previous status change already, before this one is written.
            seq = transcript.append(
                TokensRecord(t=RecordType.TOKENS, promptTokens=10, completionTokens=1, totalTokens=11, cost=0.0)
            )
            sent[f"conv/{name}/{seq}"] = time.perf_counter()
            await transcript.sync()
            await kube.patch(status_path, {"status": {"version": 3 + n}})
            await asyncio.sleep(0.05)
        transcript.append(AnswerRecord(t=RecordType.ANSWER, text="done"))
        await transcript.sync()
        await kube.patch(status_path, {"status": {"version": 3 + rounds}})
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    await kube.aclose()
    ms = [r * 1000 for r in received]
    assert len(received) == streams * rounds, f"{len(received)} of {streams * rounds} events arrived"
    print(
        f"SSE latency, record + status written -> client received, {streams} streams x {rounds} events "
        f"({len(ms)} received): p50 {statistics.median(ms):.1f} ms, p99 {pct(ms, 0.99):.1f} ms, "
        f"max {max(ms):.1f} ms (target p99 <= 100 ms)"
    )
    per_stream = (rss[1] - rss[0]) / (streams - wave)
    print(
        f"memory per open stream: {per_stream:.1f} KiB (API RSS {rss[0]} KiB with {wave} streams -> "
        f"{rss[1]} KiB with {streams}; target <= 64 KiB)"
    )


async def requests_per_second(
    api: ApiProcess, path: str, body: dict[str, Any] | None, total: int, concurrency: int
) -> float:
    async with httpx.AsyncClient(base_url=api.base, timeout=120) as http:
        left = total

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                response = await (http.get(path) if body is None else http.post(path, json=body))
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return total / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and requests (a smoke test)")
    parser.add_argument("--streams", type=int, default=100)
    args = parser.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lestrade-api-bench-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    server = ModelServerProcess([Scenario(name="bench-instant", steps=[Step(content="Instant answer.")])], tmp)
    cluster = LocalCluster.start()
    api = operator = None
    try:
        admin = cluster.api_client()
        install_crds(admin, wait=True, timeout=60)
        namespace = new_namespace(admin, f"api-bench-{uuid.uuid4().hex[:6]}")
        models = write_model_list(tmp / "models.yaml", server, "bench-instant")
        api = ApiProcess(cluster, namespace, models, tmp / "api.log")
        asyncio.run(sse_latency(api, cluster, namespace, args.streams, 5 if args.quick else 20))
        model_rps = asyncio.run(requests_per_second(api, "/api/model", None, 200 if args.quick else 2000, 10))
        print(f"/api/model: {model_rps:.0f} requests/s (10 concurrent clients)")
        operator = OperatorProcess(cluster, namespace, models, tmp / "operator.log", test_tools=False)
        operator.start()
        chats = 10 if args.quick else 60
        chat_rps = asyncio.run(requests_per_second(api, "/api/chat", {"ask": "Anything wrong?"}, chats, 10))
        print(
            f"/api/chat with an instant model, end to end through the operator: {chat_rps:.1f} chats/s "
            f"({chats} chats, 10 concurrent clients; each is a Conversation)"
        )
        k8s.CoreV1Api(admin).delete_namespace(namespace)
    finally:
        for process in (operator, api):
            if process is not None:
                process.terminate() if isinstance(process, OperatorProcess) else process.stop()
        cluster.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
