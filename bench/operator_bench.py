"""Operator benchmark: overhead per investigation, a burst of 200, and memory.

    .venv/bin/python bench/operator_bench.py [--quick]

Runs a local control plane, the scripted model server and the operator (the product's
`run_operator`, in a thread for the timing parts and as a process for the memory part), and
prints:

1. overhead: Investigation created -> status Succeeded (seen by a watch), minus the time the
   run spent in model calls and tools, for 5 tool steps with an instant model (median, p90);
2. burst: 200 Investigations created at once, model latency 500 ms, 4 model calls each (3 tool
   steps and the answer): wall time from the first create to the last Succeeded, against the
   ideal 4 x 0.5 s (target: within 1.5x);
3. memory: the operator process's RSS idle, and per running Investigation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "operator"))

import yaml  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes import watch  # noqa: E402
from opkit import (  # noqa: E402
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    OperatorThread,
    investigation,
    model_list,
    write_model_list,
)

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)
from lestrade.localcluster import LocalCluster  # noqa: E402
from lestrade.localcluster.cluster import free_port  # noqa: E402
from lestrade.modelserver import Scenario, Step, ToolCall  # noqa: E402
from lestrade.operator.agent import model as agent_model  # noqa: E402
from lestrade.operator.tools.base import ToolOutput, ToolRegistry, Toolset  # noqa: E402
from lestrade.resources.install import install_crds  # noqa: E402


class Timings:
    """Time the run spends in model calls and tools (summed over concurrent calls)."""

    def __init__(self) -> None:
        self.model = 0.0
        self.tools = 0.0
        self.lock = threading.Lock()

    def add(self, kind: str, seconds: float) -> None:
        with self.lock:
            setattr(self, kind, getattr(self, kind) + seconds)


TIMINGS = Timings()
_complete = agent_model.complete


async def _timed_complete(*args: Any, **kwargs: Any) -> Any:
    start = time.perf_counter()
    try:
        async for item in _complete(*args, **kwargs):
            yield item
    finally:
        TIMINGS.add("model", time.perf_counter() - start)


class Echo:
    """A tool that does nothing, for measuring the operator and not the tools."""

    name = "echo"
    description = "Echo the text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        return f"echo {params.get('text', '')}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        start = time.perf_counter()
        out = ToolOutput(status="success", data=str(params.get("text", "")))
        TIMINGS.add("tools", time.perf_counter() - start)
        return out


def bench_tools(_: k8s.ApiClient) -> ToolRegistry:
    return ToolRegistry([Toolset("bench", [Echo()])])


class ModelServerProcess:
    """The scripted model server in a process of its own, as a real model is outside the
    operator's process (so its CPU does not count as the operator's)."""

    def __init__(self, scenarios: list[Scenario], tmp: Path) -> None:
        path = tmp / "scenarios.yaml"
        path.write_text(yaml.safe_dump([sc.model_dump(exclude_none=True) for sc in scenarios]))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lestrade.modelserver", "--port", str(self.port), "--scenario-file", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the model server did not start") from None
                time.sleep(0.1)

    def litellm_params(self, scenario: str) -> dict[str, str]:
        return {"model": f"openai/{scenario}", "api_base": f"http://127.0.0.1:{self.port}/v1", "api_key": "bench"}

    def requests(self, scenario: str) -> list[dict[str, Any]]:
        """The request bodies `scenario` received, oldest first (the server's `GET /requests`)."""
        query = urllib.parse.urlencode({"scenario": scenario})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/requests?{query}", timeout=60) as reply:
            return json.load(reply)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def scenario(name: str, tool_steps: int, latency_ms: int = 0) -> Scenario:
    steps = [
        Step(tool_calls=[ToolCall(name="echo", arguments={"text": f"step {i}"})], latency_ms=latency_ms)
        for i in range(tool_steps)
    ]
    steps.append(Step(content="Done: nothing is wrong.", latency_ms=latency_ms))
    return Scenario(name=name, steps=steps)


def watch_until_done(
    api: k8s.ApiClient,
    namespace: str,
    names: set[str],
    version: str,
    timeout: float,
    on_done: Callable[[str, float], None],
) -> None:
    custom = k8s.CustomObjectsApi(api)
    left = set(names)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            resource_version=version,
            timeout_seconds=int(timeout),
        )
        for event in stream:
            obj = event["object"]
            version = obj["metadata"]["resourceVersion"]
            name = obj["metadata"]["name"]
            if name in left and (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                on_done(name, time.perf_counter())
                if obj["status"]["phase"] != "Succeeded":
                    raise RuntimeError(f"{name} failed: {obj['status'].get('message')}")
                left.discard(name)
                if not left:
                    return
    if left:
        raise TimeoutError(f"{len(left)} investigations did not finish")


def new_namespace(api: k8s.ApiClient, name: str) -> str:
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


def overhead(cluster: LocalCluster, api: k8s.ApiClient, server: ModelServerProcess, runs: int) -> None:
    namespace = new_namespace(api, "bench-overhead")
    custom = k8s.CustomObjectsApi(api)
    with OperatorThread(cluster, namespace, model_list(server, "bench-five"), tools=bench_tools, status_interval=0.3):
        samples = []
        for i in range(runs + 2):  # the first two warm up imports and connections
            name = f"o-{i}"
            version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"][
                "resourceVersion"
            ]
            model0, tools0 = TIMINGS.model, TIMINGS.tools
            done: dict[str, float] = {}
            start = time.perf_counter()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, investigation(name))
            watch_until_done(api, namespace, {name}, version, 60, done.__setitem__)
            wall = done[name] - start
            spent = (TIMINGS.model - model0) + (TIMINGS.tools - tools0)
            if i >= 2:
                samples.append((wall, spent))
        walls = sorted(w for w, _ in samples)
        overheads = sorted(w - s for w, s in samples)
        model_tool = sorted(s for _, s in samples)
        print(f"overhead: {runs} investigations x 5 tool steps, instant model")
        print(f"  created -> Succeeded   median {statistics.median(walls) * 1000:.0f} ms")
        print(
            f"  model calls + tools    median {statistics.median(model_tool) * 1000:.0f} ms "
            "(litellm client work on an instant model)"
        )
        print(
            f"  operator overhead      median {statistics.median(overheads) * 1000:.0f} ms, "
            f"p90 {overheads[int(len(overheads) * 0.9) - 1] * 1000:.0f} ms  (target <= 150 ms)"
        )


def burst(cluster: LocalCluster, api: k8s.ApiClient, server: ModelServerProcess, count: int) -> None:
    namespace = new_namespace(api, f"bench-burst-{count}")
    custom = k8s.CustomObjectsApi(api)
    ideal = 4 * 0.5
    with OperatorThread(
        cluster,
        namespace,
        model_list(server, "bench-burst"),
        tools=bench_tools,
        runs_concurrency=count,
        status_interval=0.5,
    ):
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, investigation("warmup"))
        version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
        watch_until_done(api, namespace, {"warmup"}, version, 60, lambda *_: None)
        names = {f"b-{i}" for i in range(count)}
        version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
        finished: dict[str, float] = {}
        result: list[BaseException] = []

        def observe() -> None:
            try:
                watch_until_done(api, namespace, names, version, 300, finished.__setitem__)
            except BaseException as exc:
                result.append(exc)

        watcher = threading.Thread(target=observe)
        watcher.start()
        cpu = time.process_time()
        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda n: custom.create_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, investigation(n)
                    ),
                    sorted(names),
                )
            )
        created = time.perf_counter() - start
        watcher.join()
        if result:
            raise result[0]
        wall = max(finished.values()) - start
        cpu = time.process_time() - cpu
        print(f"burst: {count} investigations at once, 4 model calls of 500 ms each")
        print(
            f"  all created after {created:.2f} s; last Succeeded after {wall:.2f} s "
            f"= {wall / ideal:.2f}x the ideal {ideal:.1f} s (target <= 1.5x)"
        )
        print(
            f"  operator process CPU {cpu:.1f} s = {cpu / count * 1000:.0f} ms per investigation "
            f"({os.cpu_count()} cores shared with the apiserver, etcd and the model server)"
        )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def memory(cluster: LocalCluster, api: k8s.ApiClient, server: ModelServerProcess, count: int, tmp: Path) -> None:
    namespace = new_namespace(api, "bench-memory")
    models = write_model_list(tmp / "models.yaml", server, "bench-memory")
    proc = OperatorProcess(
        cluster, namespace, models, tmp / "operator.log", env={"LESTRADE_MAX_CONCURRENT_RUNS": str(count + 10)}
    ).start()
    custom = k8s.CustomObjectsApi(api)

    def running(names: set[str]) -> None:
        version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
        for name in names:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, investigation(name))
        left = set(names)
        for event in watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            resource_version=version,
            timeout_seconds=120,
        ):
            if (event["object"].get("status") or {}).get("phase") == "Running":
                left.discard(event["object"]["metadata"]["name"])
                if not left:
                    return
        raise TimeoutError(f"not Running: {left}")

    try:
        assert proc.proc is not None
        running({"warmup"})
        time.sleep(3)  # let the process settle before reading RSS (a measurement, not a sync)
        idle = rss_kib(proc.proc.pid)
        running({f"m-{i}" for i in range(count)})
        time.sleep(3)
        busy = rss_kib(proc.proc.pid)
        print(
            f"memory: operator process RSS {idle / 1024:.0f} MiB with one run waiting on the model; "
            f"{busy / 1024:.0f} MiB with {count + 1}: "
            f"{(busy - idle) / count:.0f} KiB per running investigation"
        )
    finally:
        proc.terminate()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    args = parser.parse_args()
    import lestrade.operator.agent.loop as loop_module

    loop_module.complete = _timed_complete  # type: ignore[attr-defined]
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lestrade-bench-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    server = ModelServerProcess(
        [
            scenario("bench-five", 5),
            scenario("bench-burst", 3, latency_ms=500),
            scenario("bench-memory", 1, latency_ms=600_000),
        ],
        tmp,
    )
    cluster = LocalCluster.start()
    try:
        api = cluster.api_client()
        install_crds(api, wait=True, timeout=60)
        overhead(cluster, api, server, 5 if args.quick else 30)
        for count in (20,) if args.quick else (20, 200):
            burst(cluster, api, server, count)
        memory(cluster, api, server, 10 if args.quick else 50, tmp)
    finally:
        cluster.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
