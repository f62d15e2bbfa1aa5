"""Burst benchmark (issue #11): the operator next to the bare engine, in one run.

    .venv/bin/python bench/burst_bench.py [--count 200] [--quick]

Same machine, same run, same scripted model server (its own process, 500 ms per call):

1. engine burst: `count` runs of the agent engine alone (in-process, no Kubernetes), 4 model
   calls each (3 `echo` tool steps and the answer), all at once: wall time and CPU per run;
2. operator burst: `count` Investigations created on the real apiserver -> all Succeeded,
   with the operator (the product's `run_operator`) in a thread of this process: wall time
   and the operator's CPU per investigation (this process's CPU minus the threads that create
   and watch the Investigations), printed against the targets (wall <= 1.5x the engine's,
   CPU <= 2x the engine's);
3. apiserver requests per investigation by kind, counted at the operator's HTTP client (every
   aiohttp request of this process to the apiserver: `lestrade.kube` and Kopf's own client,
   classified by path and body) and at the tools' blocking client; and watch events per
   investigation by resource, from the apiserver's own `apiserver_watch_events_total`;
4. the same two bursts where the 3 tool steps are `kubectl_get_by_name` on a pod (the
   read-only Kubernetes tools against the same apiserver);
5. start and memory: `python -m lestrade.operator` cold start to ready (process start ->
   Kopf's liveness endpoint answers), its RSS idle and per running investigation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "operator"))

import aiohttp  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from operator_bench import Echo, ModelServerProcess, new_namespace, rss_kib, watch_until_done  # noqa: E402
from opkit import GROUP, PLURAL, VERSION, OperatorProcess, OperatorThread, investigation, model_list, write_model_list  # noqa: E402

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)
from lestrade.config import ModelConfig  # noqa: E402
from lestrade.localcluster import LocalCluster  # noqa: E402
from lestrade.localcluster.cluster import free_port  # noqa: E402
from lestrade.modelserver import Scenario, Step, ToolCall  # noqa: E402
from lestrade.operator.agent import Agent, Limits, PromptConfig  # noqa: E402
from lestrade.operator.tools.base import ToolRegistry, Toolset  # noqa: E402
from lestrade.operator.tools.kubernetes.toolset import kubernetes_toolset  # noqa: E402
from lestrade.resources.install import install_crds  # noqa: E402

LATENCY_MS = 500
TARGET_NAMESPACE = "bench-target"  # where the pod the tool steps read lives
TARGET_POD = "bench-pod"


# -- counting requests ---------------------------------------------------------------------------


class RequestCounter:
    """Counts this process's requests to the apiserver by kind.

    aiohttp carries every client of the operator (`lestrade.kube`, Kopf's, and the read-only
    tools' `KubeApi`, over `lestrade.kube` too), so wrapping `ClientSession._request` sees
    every one of them."""

    def __init__(self, server: str) -> None:
        self.server = server.rstrip("/")
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self._installed = False

    def add(self, kind: str) -> None:
        with self.lock:
            self.counts[kind] += 1

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        original = aiohttp.ClientSession._request
        counter = self

        async def counted(session: Any, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
            text = str(url)
            if text.startswith(counter.server):
                counter.add(classify(method, text[len(counter.server) :], kwargs))
            return await original(session, method, url, *args, **kwargs)

        aiohttp.ClientSession._request = counted  # type: ignore[method-assign]


def _body(kwargs: dict[str, Any]) -> Any:
    if kwargs.get("json") is not None:
        return kwargs["json"]
    data = kwargs.get("data")
    if isinstance(data, (str, bytes)):
        try:
            return json.loads(data)
        except ValueError:
            return None
    return None


def _patch_parts(body: Any) -> list[str]:
    """What a patch changes: top-level keys, and metadata's finalizers/annotations; for a JSON
    patch (a list of operations, as Kopf sends), the same read from the operations' paths."""
    if isinstance(body, list):
        parts = set()
        for op in body:
            path = str((op or {}).get("path", "")).strip("/").split("/")
            if path[:2] == ["metadata", "annotations"] and len(path) > 2:
                parts.add("annotation " + path[2].replace("~1", "/"))
            elif path and path[0]:
                parts.add("/".join(path[:2]))
        return sorted(parts)
    if isinstance(body, dict):
        meta = body.get("metadata") or {}
        parts = [f"metadata/{k}" for k in meta]
        parts += [f"annotation {a}" for a in (meta.get("annotations") or {})]
        return sorted(parts + [k for k in body if k != "metadata"])
    return []


def classify(method: str, path: str, kwargs: dict[str, Any]) -> str:
    """A request's kind: what it is for, from its method, path and body."""
    method = method.upper()  # Kopf's client writes "patch"
    path, _, query = path.partition("?")
    params = kwargs.get("params") or {}
    if "watch=true" in query or str(params.get("watch", "")).lower() == "true":
        return f"WATCH {path.rsplit('/', 1)[-1]}"
    if path.endswith("/events") and method == "POST":
        return "POST Event"
    if "/configmaps" in path:
        return f"{method} transcript ConfigMap"
    if "/investigations" in path or "/conversations" in path:
        if path.endswith("/status"):
            return f"{method} status"
        if method == "PATCH":
            parts = _patch_parts(_body(kwargs))
            return f"PATCH object ({', '.join(parts) or 'empty'})"
        name = path.rstrip("/").split("/")[-1]
        collection = name in ("investigations", "conversations")
        return f"{method} {'list' if collection else 'object'}"
    if "/leases" in path or "kopfpeerings" in path:
        return f"{method} peering"
    return f"{method} {path.rsplit('/', 1)[-1] if path.count('/') > 3 else path}"


def apiserver_metrics(api: k8s.ApiClient) -> str:
    request = api.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(*request)
    return bytes(response.read()).decode()


def watch_events(api: k8s.ApiClient) -> Counter[str]:
    """`apiserver_watch_events_total` by resource (events sent to all watchers)."""
    out: Counter[str] = Counter()
    for line in apiserver_metrics(api).splitlines():
        if line.startswith("apiserver_watch_events_total{"):
            labels, value = line.rsplit(" ", 1)
            resource = re.search(r'resource="([^"]*)"', labels)
            out[resource.group(1) if resource else "?"] += int(float(value))
    return out


# -- scenarios and tools -------------------------------------------------------------------------


def echo_scenario(name: str) -> Scenario:
    steps = [
        Step(tool_calls=[ToolCall(name="echo", arguments={"text": f"step {i}"})], latency_ms=LATENCY_MS)
        for i in range(3)
    ]
    return Scenario(name=name, steps=[*steps, Step(content="Done: nothing is wrong.", latency_ms=LATENCY_MS)])


def kube_scenario(name: str) -> Scenario:
    call = {"kind": "pod", "name": TARGET_POD, "namespace": TARGET_NAMESPACE}
    steps = [
        Step(tool_calls=[ToolCall(name="kubectl_get_by_name", arguments=call)], latency_ms=LATENCY_MS) for _ in range(3)
    ]
    return Scenario(name=name, steps=[*steps, Step(content="Done: the pod is fine.", latency_ms=LATENCY_MS)])


def echo_tools(_: k8s.ApiClient, scope: Any = None) -> ToolRegistry:
    return ToolRegistry([Toolset("bench", [Echo()])])


def kube_tools(api_client: k8s.ApiClient, scope: Any = None) -> ToolRegistry:
    """What the product builds per run for the Kubernetes tools (a new KubeApi each run)."""
    return ToolRegistry([kubernetes_toolset(api_client)])


# -- the bursts ----------------------------------------------------------------------------------


def engine_burst(
    server: ModelServerProcess, scenario: str, count: int, tools: Any, api_client: k8s.ApiClient | None
) -> tuple[float, float]:
    """`count` engine runs at once in a fresh event loop: (wall s, CPU s)."""
    model = ModelConfig(scenario, server.litellm_params(scenario))

    async def one(i: int) -> None:
        agent = Agent(model, tools(api_client), PromptConfig(), Limits(max_steps=10))
        events = [e async for e in agent.run(agent.initial_messages(f"run {i}"))]
        if events[-1].kind != "answer":
            raise RuntimeError(f"engine run {i} ended with {events[-1]!r}")

    async def burst() -> tuple[float, float]:
        await one(-1)  # warm up imports and connections, as the operator's warm-up does
        cpu, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return time.perf_counter() - start, time.process_time() - cpu

    return asyncio.run(burst())


def thread_cpu() -> float:
    return time.thread_time()


def operator_burst(
    cluster: LocalCluster,
    api: k8s.ApiClient,
    server: ModelServerProcess,
    scenario: str,
    count: int,
    tools: Any,
    counter: RequestCounter,
    label: str,
) -> dict[str, Any]:
    namespace = new_namespace(api, f"bench-{label}")
    custom = k8s.CustomObjectsApi(api)
    with OperatorThread(
        cluster, namespace, model_list(server, scenario), tools=tools, runs_concurrency=count + 10, status_interval=0.5
    ):
        version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, investigation("warmup"))
        watch_until_done(api, namespace, {"warmup"}, version, 120, lambda *_: None)
        names = {f"b-{i}" for i in range(count)}
        version = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
        finished: dict[str, float] = {}
        errors: list[BaseException] = []
        bench_cpu: list[float] = []  # CPU of this benchmark's own threads, not the operator's
        lock = threading.Lock()

        phases: dict[tuple[str, str], float] = {}  # (name, phase) -> first seen

        def observe() -> None:
            cpu = thread_cpu()
            try:
                watch_phases(api, namespace, names, version, 600, phases)
                finished.update({n: t for (n, ph), t in phases.items() if ph in ("Succeeded", "Failed")})
            except BaseException as exc:
                errors.append(exc)
            with lock:
                bench_cpu.append(thread_cpu() - cpu)

        def create(name: str) -> None:
            cpu = thread_cpu()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, investigation(name))
            with lock:
                bench_cpu.append(thread_cpu() - cpu)

        watcher = threading.Thread(target=observe)
        events0 = watch_events(api)
        requests0 = counter.snapshot()
        watcher.start()
        cpu = time.process_time()
        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, sorted(names)))
        watcher.join()
        if errors:
            raise errors[0]
        wall = max(finished.values()) - start
        cpu = time.process_time() - cpu - sum(bench_cpu)
        # Let the last background writes (Events, Kopf's finalizer removal) land, then count.
        time.sleep(3)  # a measurement window, not a synchronisation
        requests = counter.snapshot() - requests0
        events = watch_events(api) - events0

    def spread(a: str, b: str) -> str:
        spans = sorted(
            phases[(n, b)] - (phases[(n, a)] if a else start)
            for n in names
            if (n, b) in phases and (not a or (n, a) in phases)
        )
        if not spans:
            return "n/a"
        return f"median {spans[len(spans) // 2]:.1f} s, max {spans[-1]:.1f} s"

    latency = {
        "created -> Pending": spread("", "Pending"),
        "created -> Running": spread("", "Running"),
        "Running -> Succeeded": spread("Running", "Succeeded"),
    }
    return {"wall": wall, "cpu": cpu, "requests": requests, "events": events, "latency": latency}


def watch_phases(
    api: k8s.ApiClient,
    namespace: str,
    names: set[str],
    version: str,
    timeout: float,
    phases: dict[tuple[str, str], float],
) -> None:
    """Records when each Investigation is first seen in each phase, until all have finished."""
    from kubernetes import watch

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
            phase = (obj.get("status") or {}).get("phase")
            if name not in names or not phase:
                continue
            phases.setdefault((name, phase), time.perf_counter())
            if phase == "Failed":
                raise RuntimeError(f"{name} failed: {obj['status'].get('message')}")
            if phase == "Succeeded":
                left.discard(name)
                if not left:
                    stream.close()
                    return
    if left:
        raise TimeoutError(f"{len(left)} investigations did not finish")


def report_pair(title: str, count: int, engine: tuple[float, float], op: dict[str, Any]) -> None:
    e_wall, e_cpu = engine
    o_wall, o_cpu = op["wall"], op["cpu"]
    e_per, o_per = e_cpu / count * 1000, o_cpu / count * 1000
    print(f"{title}: {count} runs at once, 4 model calls of {LATENCY_MS} ms each")
    print(f"  engine alone     wall {e_wall:6.2f} s   CPU {e_per:6.1f} ms/run")
    print(f"  operator         wall {o_wall:6.2f} s   CPU {o_per:6.1f} ms/investigation")
    print(
        f"  ratio            wall {o_wall / e_wall:5.2f}x (target <= 1.5x)   CPU {o_per / e_per:5.2f}x (target <= 2x)"
    )
    for what, text in op["latency"].items():
        print(f"  {what:<22} {text}")
    print(
        f"  apiserver requests per investigation (operator process), total {sum(op['requests'].values()) / count:.1f}:"
    )
    for kind, n in sorted(op["requests"].items(), key=lambda kv: -kv[1]):
        print(f"    {n / count:6.2f}  {kind}")
    print("  watch events per investigation sent by the apiserver (all watchers), by resource:")
    for resource, n in sorted(op["events"].items(), key=lambda kv: -kv[1]):
        if n / count >= 0.05:
            print(f"    {n / count:6.2f}  {resource}")


def make_target_pod(api: k8s.ApiClient) -> None:
    new_namespace(api, TARGET_NAMESPACE)
    core = k8s.CoreV1Api(api)
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=TARGET_POD, labels={"app": "bench"}),
        spec=k8s.V1PodSpec(
            containers=[k8s.V1Container(name="app", image="bench:1")], automount_service_account_token=False
        ),
    )
    deadline = time.monotonic() + 60
    while True:  # the namespace's default ServiceAccount may not exist yet
        try:
            core.create_namespaced_pod(TARGET_NAMESPACE, pod)
            return
        except k8s.ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# -- start and memory ----------------------------------------------------------------------------


def wait_ready(proc: OperatorProcess, port: int, began: float, limit: float) -> float:
    """Seconds from `began` (just before `proc.start()`) until the operator's liveness endpoint
    answers (polled: it is the figure measured, so nothing can be waited on instead)."""
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return time.perf_counter() - began
        except OSError:
            if not proc.alive() or time.perf_counter() - began > limit:
                raise RuntimeError("the operator did not become ready:\n" + proc.output()[-3000:]) from None
            time.sleep(0.02)


def start_and_memory(
    cluster: LocalCluster, api: k8s.ApiClient, server: ModelServerProcess, count: int, tmp: Path
) -> None:
    namespace = new_namespace(api, "bench-start")
    models = write_model_list(tmp / "models.yaml", server, "bench-slow")
    port = free_port()
    proc = OperatorProcess(
        cluster,
        namespace,
        models,
        tmp / "operator.log",
        test_tools=False,
        extra_args=["--standalone", "--liveness", f"http://127.0.0.1:{port}/healthz"],
        env={"LESTRADE_MAX_CONCURRENT_RUNS": str(count + 10)},
    )
    began = time.perf_counter()
    proc.start()
    try:
        ready = wait_ready(proc, port, began, limit=120)
        assert proc.proc is not None
        time.sleep(2)  # settle before reading RSS (a measurement, not a synchronisation)
        idle = rss_kib(proc.proc.pid)
        custom = k8s.CustomObjectsApi(api)

        def running(names: list[str]) -> None:
            for name in names:
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, investigation(name))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
                if sum((i.get("status") or {}).get("phase") == "Running" for i in items) >= len(names):
                    time.sleep(2)  # settle before reading RSS (a measurement, not a synchronisation)
                    return
                time.sleep(0.5)
            raise TimeoutError("the investigations did not all start")

        running(["first"])  # the first run imports litellm (lazily): counted apart
        one = rss_kib(proc.proc.pid)
        running([f"m-{i}" for i in range(count)])
        busy = rss_kib(proc.proc.pid)
        print("start and memory: `python -m lestrade.operator` (the product's tools)")
        print(f"  cold start to ready (liveness answers)  {ready:5.2f} s   (target <= 2 s)")
        print(f"  RSS idle                                {idle / 1024:5.0f} MiB (target <= 150 MiB)")
        print(f"  RSS with 1 running (litellm imported)   {one / 1024:5.0f} MiB")
        print(
            f"  RSS with {count + 1} running                  {busy / 1024:5.0f} MiB: "
            f"{(busy - one) / count:.0f} KiB per running investigation"
        )
    finally:
        proc.terminate()


def import_time() -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import lestrade.operator.__main__"], check=True)
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 runs per burst (a smoke test)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: echo,kube,start")
    args = parser.parse_args()
    count = 20 if args.quick else args.count
    skip = set(filter(None, args.skip.split(",")))
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lestrade-burst-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    server = ModelServerProcess(
        [
            echo_scenario("bench-echo"),
            kube_scenario("bench-kube"),
            Scenario(name="bench-slow", steps=[Step(content="late", latency_ms=600_000)]),
        ],
        tmp,
    )
    cluster = LocalCluster.start()
    try:
        api = cluster.api_client()
        install_crds(api, wait=True, timeout=60)
        counter = RequestCounter(api.configuration.host)
        counter.install()
        print(f"python -c 'import lestrade.operator.__main__': {import_time():.2f} s")
        if "echo" not in skip:
            engine = engine_burst(server, "bench-echo", count, echo_tools, None)
            op = operator_burst(cluster, api, server, "bench-echo", count, echo_tools, counter, "echo")
            report_pair("burst, echo tools", count, engine, op)
        if "kube" not in skip:
            make_target_pod(api)
            engine = engine_burst(server, "bench-kube", count, kube_tools, api)
            op = operator_burst(cluster, api, server, "bench-kube", count, kube_tools, counter, "kube")
            report_pair("burst, 3 x kubectl_get_by_name", count, engine, op)
        if "start" not in skip:
            start_and_memory(cluster, api, server, 20 if args.quick else 50, tmp)
    finally:
        cluster.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
