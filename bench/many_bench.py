"""Many finished Investigations (issue #11, items 3 and 4): what 10,000 of them cost at rest.

    .venv/bin/python bench/many_bench.py [--count 10000] [--quick]

Creates `count` finished Investigations, each with a small transcript ConfigMap owned by it
(created, then given a Succeeded status with a short analysis, concurrently over
`lestrade.kube`), then prints, each beside its target where the issue sets one:

1. etcd bytes per investigation (transcript included): the apiserver's
   `apiserver_storage_size_bytes` (the etcd database, history included) before and after;
2. `kubectl get inv -n NS` latency (the real kubectl, median of 3);
3. the operator (`python -m lestrade.operator`, the product's tools) started on that namespace:
   time to ready (Kopf's liveness endpoint), time until its CPU is idle again (its first list and
   the processing of what it lists), CPU spent on that, then RSS and CPU per second idle;
4. the API (`python -m lestrade.api`, its shared watches of every Investigation and
   Conversation): time to ready (`/readyz`: the lists done, the watches open), RSS and idle CPU,
   and the latency of the console's run list (`GET /api/console/runs`, every row) and of past
   findings (`GET /api/findings`: the first search builds the index; RSS after it);
5. TTL: `ttl_count` more finished Investigations with `ttlSecondsAfterFinished` and a
   transcript each, created while both run: seconds until every one and its transcript are gone
   (the operator's TTL delete, then the garbage collector).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "operator"))

from burst_bench import apiserver_metrics, wait_ready  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from operator_bench import new_namespace, rss_kib  # noqa: E402
from opkit import GROUP, PLURAL, VERSION, OperatorProcess, investigation  # noqa: E402

import lestrade  # noqa: E402,F401
from lestrade.kube import Kube, api_path, investigation_path  # noqa: E402
from lestrade.localcluster import LocalCluster  # noqa: E402
from lestrade.localcluster.build import ensure_binaries  # noqa: E402
from lestrade.localcluster.cluster import free_port  # noqa: E402
from lestrade.resources.install import install_crds  # noqa: E402
from lestrade.timefmt import now_iso  # noqa: E402

ANALYSIS = (
    "The pod web-1 restarts because its container exceeds its 64Mi memory limit "
    "(OOMKilled, exit code 137). Raise the limit or fix the leak. "
) * 8  # ~1 KiB
TRANSCRIPT_LABEL = "lestrade.dev/transcript-of"  # lestrade.runs.transcript's labels
CHUNK_LABEL = "lestrade.dev/transcript-chunk"
TARGET_RSS_MIB = 150
TARGET_START_S = 2.0


def transcript_records() -> dict[str, str]:
    """A small run's records (~3 KiB): question, 3 tool steps, answer (not decoded here)."""
    records = [{"t": "message", "message": {"role": "user", "content": "Why does web-1 restart?"}}]
    for i in range(3):
        records.append(
            {
                "t": "message",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {"name": "kubectl_describe", "arguments": '{"kind":"pod","name":"web-1"}'},
                        }
                    ],
                },
            }
        )
        records.append(
            {
                "t": "tool_result",
                "id": f"c{i}",
                "result": {"status": "success", "data": "State: Waiting (CrashLoopBackOff) " * 8},
            }
        )
    records.append({"t": "answer", "analysis": ANALYSIS[:400]})
    return {f"r-{i:07d}": json.dumps(r, separators=(",", ":")) for i, r in enumerate(records)}


def storage_bytes(api: k8s.ApiClient) -> int:
    total = 0
    for line in apiserver_metrics(api).splitlines():
        if line.startswith("apiserver_storage_size_bytes"):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


async def create_finished(
    api: k8s.ApiClient, namespace: str, count: int, *, prefix: str = "done", **spec: object
) -> float:
    kube = Kube(api)
    gate = asyncio.Semaphore(32)
    records = transcript_records()

    async def one(i: int) -> None:
        name = f"{prefix}-{i:05d}"
        async with gate:
            made = await kube.create(investigation_path(namespace), investigation(name, **spec))
            uid = made["metadata"]["uid"]
            await kube.create(
                api_path("v1", "configmaps", namespace),
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": f"{name}-transcript-{uid[:8]}-0",
                        "labels": {TRANSCRIPT_LABEL: uid, CHUNK_LABEL: "0"},
                        "ownerReferences": [
                            {
                                "apiVersion": made["apiVersion"],
                                "kind": made["kind"],
                                "name": name,
                                "uid": uid,
                                "controller": True,
                                "blockOwnerDeletion": False,
                            }
                        ],
                    },
                    "data": records,
                },
                parse=False,
            )
            now = now_iso()
            await kube.patch(
                investigation_path(namespace, name) + "/status",
                {
                    "status": {
                        "phase": "Succeeded",
                        "startTime": now,
                        "completionTime": now,
                        "analysis": ANALYSIS,
                        "message": "Investigation complete after 4 step(s) and 3 tool call(s)",
                        "conditions": [
                            {
                                "type": "Succeeded",
                                "status": "True",
                                "reason": "Completed",
                                "message": "done",
                                "lastTransitionTime": now,
                            }
                        ],
                    }
                },
                parse=False,
            )

    began = time.perf_counter()
    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await kube.aclose()
    return time.perf_counter() - began


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, began: float) -> tuple[float, float, int, float]:
    """Waits until the process is idle (less than 5% of a core over 2 s: a measurement window,
    not a synchronisation); (seconds from `began` until then, CPU s spent, RSS KiB, idle CPU s/s
    over the next 10 s)."""
    last = cpu_seconds(pid)
    while time.perf_counter() - began < 600:
        time.sleep(2)
        now = cpu_seconds(pid)
        if now - last < 0.1:
            break
        last = now
    settled = time.perf_counter() - began - 2
    spent = cpu_seconds(pid)
    rss = rss_kib(pid)
    time.sleep(10)
    return settled, spent, rss, (cpu_seconds(pid) - spent) / 10


def mark(value: float, target: float) -> str:
    return "met" if value <= target else "MISSED"


class ApiProcess:
    """`python -m lestrade.api` on a free port, authentication off (outside a cluster)."""

    def __init__(self, cluster: LocalCluster, namespace: str, models: Path, log: Path) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "LESTRADE_NAMESPACE": namespace,
            "LESTRADE_API_HOST": "127.0.0.1",
            "LESTRADE_API_PORT": str(self.port),
            "LESTRADE_API_AUTH": "false",
            "LESTRADE_MODEL_LIST": str(models),
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lestrade.api"], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ready(self, began: float, limit: float) -> float:
        """Seconds from `began` until /readyz says the lists are done (polled: it is the figure)."""
        while True:
            try:
                with urllib.request.urlopen(self.url("/readyz"), timeout=2) as response:
                    if response.status == 200:
                        return time.perf_counter() - began
            except OSError:
                pass
            if self.proc.poll() is not None or time.perf_counter() - began > limit:
                raise RuntimeError("the API did not become ready")
            time.sleep(0.05)

    def terminate(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def wait_gone(api: k8s.ApiClient, namespace: str, prefix: str, limit: float) -> float:
    """Seconds until no Investigation named `prefix-*` and none of their transcripts is left
    (polled every 0.5 s: the figure measured)."""
    custom, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    began = time.perf_counter()
    while time.perf_counter() - began < limit:
        invs = [
            i
            for i in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
            if i["metadata"]["name"].startswith(prefix + "-")
        ]
        chunks = [
            c
            for c in core.list_namespaced_config_map(namespace, label_selector=TRANSCRIPT_LABEL).items
            if c.metadata.name.startswith(prefix + "-")
        ]
        if not invs and not chunks:
            return time.perf_counter() - began
        time.sleep(0.5)
    raise TimeoutError(f"{prefix}-* Investigations or transcripts still there after {limit:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--ttl-count", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="1,000 investigations")
    args = parser.parse_args()
    count = 1_000 if args.quick else args.count
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lestrade-many-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster.start()
    try:
        api = cluster.api_client()
        install_crds(api, wait=True, timeout=60)
        namespace = new_namespace(api, "bench-many")
        before = storage_bytes(api)
        took = asyncio.run(create_finished(api, namespace, count))
        after = storage_bytes(api)
        print(f"many: {count} finished Investigations (each with a ~3 KiB transcript) created in {took:.1f} s")
        if before or after:
            print(
                f"  etcd database growth {(after - before) / count / 1024:.1f} KiB per investigation, "
                "transcript included (apiserver_storage_size_bytes; history until compaction included)"
            )
        kubectl = ensure_binaries(["kubernetes"])["kubectl"]
        samples = []
        for _ in range(3):
            began = time.perf_counter()
            subprocess.run(
                [str(kubectl), f"--kubeconfig={cluster.kubeconfig}", "get", "inv", "-n", namespace],
                check=True,
                capture_output=True,
            )
            samples.append(time.perf_counter() - began)
        print(f"  kubectl get inv -n {namespace}: median {statistics.median(samples):.2f} s (no target; {count} rows)")

        models = tmp / "models.yaml"
        models.write_text("bench:\n  model: openai/bench\n  api_base: http://127.0.0.1:9/v1\n  api_key: x\n")
        port = free_port()
        proc = OperatorProcess(
            cluster,
            namespace,
            models,
            tmp / "operator.log",
            test_tools=False,
            extra_args=["--standalone", "--liveness", f"http://127.0.0.1:{port}/healthz"],
        )
        api_proc: ApiProcess | None = None
        began = time.perf_counter()
        proc.start()
        assert proc.proc is not None
        pid = proc.proc.pid
        try:
            ready = wait_ready(proc, port, began, limit=300)
            settled, spent, rss, idle_cpu = settle(pid, began)
            print(
                f"  operator: ready after {ready:.2f} s (target <= {TARGET_START_S:.0f} s: "
                f"{mark(ready, TARGET_START_S)}); idle again after ~{settled:.1f} s, "
                f"{spent:.1f} s CPU for start + first list"
            )
            print(
                f"  operator: RSS {rss / 1024:.0f} MiB (target <= {TARGET_RSS_MIB} MiB: "
                f"{mark(rss / 1024, TARGET_RSS_MIB)}); idle CPU {idle_cpu * 1000:.0f} ms/s"
            )

            began = time.perf_counter()
            api_proc = ApiProcess(cluster, namespace, models, tmp / "api.log")
            api_ready = api_proc.wait_ready(began, limit=300)
            a_settled, a_spent, a_rss, a_idle = settle(api_proc.proc.pid, began)
            print(
                f"  API: ready (lists done, watches open) after {api_ready:.2f} s; idle again after "
                f"~{a_settled:.1f} s, {a_spent:.1f} s CPU for start + first lists"
            )
            print(
                f"  API: RSS {a_rss / 1024:.0f} MiB (the operator's target for reference, <= "
                f"{TARGET_RSS_MIB} MiB: {mark(a_rss / 1024, TARGET_RSS_MIB)}); idle CPU {a_idle * 1000:.0f} ms/s"
            )
            runs = []
            for _ in range(3):
                began = time.perf_counter()
                with urllib.request.urlopen(api_proc.url("/api/console/runs"), timeout=60) as response:
                    rows = len(json.loads(response.read())["runs"])
                runs.append(time.perf_counter() - began)
            print(f"  API: GET /api/console/runs ({rows} rows) median {statistics.median(runs):.2f} s")
            searches = []
            for query in ("", "q=OOMKilled+memory+limit", "q=OOMKilled&name=web-1", "q=exit+code"):
                began = time.perf_counter()  # the first one indexes every run (past findings)
                with urllib.request.urlopen(api_proc.url(f"/api/findings?{query}"), timeout=300) as response:
                    hits = len(json.loads(response.read())["findings"])
                searches.append(time.perf_counter() - began)
            print(
                f"  API: GET /api/findings over {count} runs: first (builds the index) "
                f"{searches[0]:.2f} s, then median {statistics.median(searches[1:]) * 1000:.0f} ms "
                f"({hits} hits); RSS after {rss_kib(api_proc.proc.pid) / 1024:.0f} MiB "
                f"(target <= {TARGET_RSS_MIB} MiB: {mark(rss_kib(api_proc.proc.pid) / 1024, TARGET_RSS_MIB)})"
            )

            ttl = 3
            asyncio.run(create_finished(api, namespace, args.ttl_count, prefix="ttl", ttlSecondsAfterFinished=ttl))
            gone = wait_gone(api, namespace, "ttl", limit=300)
            print(
                f"  TTL: {args.ttl_count} finished with ttlSecondsAfterFinished={ttl} and a transcript each: "
                f"all gone, transcripts included, {gone:.1f} s after the last was created"
            )
            print(
                f"  RSS after that: operator {rss_kib(pid) / 1024:.0f} MiB (it began to run some of them before "
                f"they were marked finished, so litellm is imported: ~+150 MiB, see burst_bench), "
                f"API {rss_kib(api_proc.proc.pid) / 1024:.0f} MiB"
            )
        finally:
            proc.terminate()
            if api_proc is not None:
                api_proc.terminate()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
