"""Many finished Investigations (issue #11, item 3): what 10,000 of them cost at rest.

    .venv/bin/python bench/many_bench.py [--count 10000] [--quick]

Creates `count` finished Investigations (created and given a Succeeded status with a short
analysis, concurrently over `lestrade.kube`), then prints:

1. etcd bytes per investigation: the apiserver's `apiserver_storage_size_bytes` (the etcd
   database, history included) before and after, divided by the count;
2. `kubectl get inv -n NS` latency (the real kubectl, median of 3);
3. the operator (`python -m lestrade.operator`, the product's tools) started on that namespace:
   time to ready (Kopf's liveness endpoint), time until its CPU is idle again (the first list
   and the processing of every object), CPU spent on that, then RSS and CPU per second idle.

The API's figures are not measured here yet.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "operator"))

import lestrade  # noqa: E402,F401
from kubernetes import client as k8s  # noqa: E402

from lestrade.kube import Kube, investigation_path  # noqa: E402
from lestrade.localcluster import LocalCluster  # noqa: E402
from lestrade.localcluster.cluster import free_port  # noqa: E402
from lestrade.localcluster.build import ensure_binaries  # noqa: E402
from lestrade.resources.install import install_crds  # noqa: E402
from lestrade.timefmt import now_iso  # noqa: E402
from burst_bench import apiserver_metrics, wait_ready  # noqa: E402
from operator_bench import new_namespace, rss_kib  # noqa: E402
from opkit import OperatorProcess, investigation  # noqa: E402

ANALYSIS = ("The pod web-1 restarts because its container exceeds its 64Mi memory limit "
            "(OOMKilled, exit code 137). Raise the limit or fix the leak. ") * 8  # ~1 KiB


def storage_bytes(api: k8s.ApiClient) -> int:
    total = 0
    for line in apiserver_metrics(api).splitlines():
        if line.startswith("apiserver_storage_size_bytes"):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


async def create_finished(api: k8s.ApiClient, namespace: str, count: int) -> float:
    kube = Kube(api)
    gate = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        name = f"done-{i:05d}"
        async with gate:
            await kube.create(investigation_path(namespace), investigation(name), parse=False)
            now = now_iso()
            await kube.patch(investigation_path(namespace, name) + "/status", {"status": {
                "phase": "Succeeded", "startTime": now, "completionTime": now, "analysis": ANALYSIS,
                "message": "Investigation complete after 4 step(s) and 3 tool call(s)",
                "conditions": [{"type": "Succeeded", "status": "True", "reason": "Completed",
                                "message": "done", "lastTransitionTime": now}],
            }}, parse=False)

    began = time.perf_counter()
    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await kube.aclose()
    return time.perf_counter() - began


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
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
        print(f"many: {count} finished Investigations created in {took:.1f} s")
        if before or after:
            print(f"  etcd database growth {(after - before) / count / 1024:.1f} KiB per investigation "
                  "(apiserver_storage_size_bytes; history until compaction included)")
        kubectl = ensure_binaries(["kubernetes"])["kubectl"]
        samples = []
        for _ in range(3):
            began = time.perf_counter()
            subprocess.run([str(kubectl), f"--kubeconfig={cluster.kubeconfig}", "get", "inv", "-n", namespace],
                           check=True, capture_output=True)
            samples.append(time.perf_counter() - began)
        print(f"  kubectl get inv -n {namespace}: median {statistics.median(samples):.2f} s")

        models = tmp / "models.yaml"
        models.write_text("bench:\n  model: openai/bench\n  api_base: http://127.0.0.1:9/v1\n  api_key: x\n")
        port = free_port()
        proc = OperatorProcess(cluster, namespace, models, tmp / "operator.log", test_tools=False,
                               extra_args=["--standalone", "--liveness", f"http://127.0.0.1:{port}/healthz"])
        began = time.perf_counter()
        proc.start()
        assert proc.proc is not None
        pid = proc.proc.pid
        try:
            ready = wait_ready(proc, port, began, limit=300)
            # Idle again: less than 5% of a core over two seconds (a measurement window).
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
            idle_cpu = (cpu_seconds(pid) - spent) / 10
            print(f"  operator ready after {ready:.2f} s; idle again after ~{settled:.1f} s, "
                  f"{spent:.1f} s CPU for start + first list of {count}")
            print(f"  operator RSS then {rss / 1024:.0f} MiB (target: idle <= 150 MiB; an operator "
                  f"with no objects: burst_bench's idle figure); idle CPU {idle_cpu * 1000:.0f} ms/s")
        finally:
            proc.terminate()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
