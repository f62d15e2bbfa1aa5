"""The burst through `make run` — the path users take — beside the bare model floor (issue #23).

    .venv/bin/python bench/makerun_burst_bench.py [--count 200]

1. the floor of minimal requests: `count` runs of 4 model calls each (500 ms each, the same
   scripted model server in a process of its own; a one-line prompt, no tools), made bare with
   litellm at concurrency `count` (the median of three);
2. `lestrade run` (what `make run` starts: the local control plane, the operator and the API as
   processes, the admission policies, the tools' identity, per-scope identities) with that
   scripted model as its model list and the concurrency cap at `count`; then `count`
   Investigations created with one `kubectl apply` of one file, each making 3 Kubernetes reads
   (`kubectl_get_by_name` of a pod) and answering: apply to the last Succeeded;
3. the floor of the same requests: the burst's own model calls (the bodies the model server
   received: system prompt, tool schemas, tool results) made again bare with litellm, each
   run's in order, all runs at once (the median of three) — the model calls alone, without
   what the operator does around them;
4. the ratio to the floor of the same requests beside the target (<= 2x; the goal 1.5x), and
   to the floor of minimal requests;

and, before the burst, the first chat: once `lestrade run` says "Lestrade is running", one
`POST /api/chat` to a model that answers at once (issue #28: within 1 s plus the model's own
time, here none).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import yaml  # noqa: E402
from operator_bench import ModelServerProcess  # noqa: E402

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)
from lestrade.localcluster import binary_path  # noqa: E402
from lestrade.localcluster.cluster import free_port  # noqa: E402
from lestrade.modelserver import Scenario, Step, ToolCall  # noqa: E402

LATENCY_MS = 500
FLOOR_RUNS = 3
TARGET, GOAL = 2.0, 1.5
POD, NAMESPACE = "burst-target", "default"
FIRST_CHAT = "makerun-first-chat"
"""The model of the first chat: one answer, at once."""


def scenario(name: str) -> Scenario:
    call = {"kind": "pod", "name": POD, "namespace": NAMESPACE}
    steps = [
        Step(tool_calls=[ToolCall(name="kubectl_get_by_name", arguments=call)], latency_ms=LATENCY_MS) for _ in range(3)
    ]
    return Scenario(name=name, steps=[*steps, Step(content="Done: the pod is fine.", latency_ms=LATENCY_MS)])


def _litellm() -> Any:
    """litellm as the operator loads it (the same patches), for the floors."""
    from lestrade.operator.agent.model import _import

    _import()
    import litellm

    return litellm


async def _at_once(conversations: list[Awaitable[None]]) -> tuple[float, float]:
    """Runs them all at once: the wall time, and the CPU seconds the litellm client took
    (what the operator's model calls alone cost it too)."""
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*conversations)
    return time.perf_counter() - started, time.process_time() - cpu


async def bare_floor(server: ModelServerProcess, name: str, count: int) -> tuple[float, float]:
    """`count` conversations of 4 sequential litellm calls, all at once."""
    litellm, params = _litellm(), server.litellm_params(name)

    async def one(index: int) -> None:
        messages: list[dict] = [{"role": "user", "content": f"run {index}"}]
        for _ in range(4):
            reply = await litellm.acompletion(messages=messages, **params)
            message = reply.choices[0].message
            calls = message.tool_calls or []
            messages.append(
                {"role": "assistant", "content": message.content, "tool_calls": [c.model_dump() for c in calls] or None}
            )
            for c in calls:
                messages.append({"role": "tool", "tool_call_id": c.id, "content": "pod burst-target Running"})

    return await _at_once([one(i) for i in range(count)])


def by_run(bodies: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The burst's request bodies grouped per run (its first user message names it), in order."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for body in bodies:
        first = next((m.get("content") for m in body["messages"] if m.get("role") == "user"), None)
        runs.setdefault(json.dumps(first), []).append(body)
    return list(runs.values())


async def replay_floor(server: ModelServerProcess, name: str, runs: list[list[dict[str, Any]]]) -> tuple[float, float]:
    """The burst's own model calls made again bare with litellm: each run's requests (system
    prompt, tool schemas, tool results, `max_tokens`: the bodies the operator sent) in order,
    all runs at once. The model answers them as it did in the burst (its step comes from the
    messages)."""
    litellm, params = _litellm(), server.litellm_params(name)

    async def one(bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            await litellm.acompletion(**{**body, **params})

    return await _at_once([one(bodies) for bodies in runs])


def floors(
    server: ModelServerProcess, floor: Callable[[], Awaitable[tuple[float, float]]]
) -> tuple[list[tuple[float, float]], float]:
    """`floor` FLOOR_RUNS times in one event loop (litellm keeps its clients per loop), sorted
    (the median is the figure: one floor's own spread, ±10% on a 2-core machine, would go
    straight into the ratio), and the model server's CPU seconds per floor."""

    async def each() -> list[tuple[float, float]]:
        return [await floor() for _ in range(FLOOR_RUNS)]

    before = process_cpu(server.proc.pid)
    walls = sorted(asyncio.run(each()))
    return walls, (process_cpu(server.proc.pid) - before) / FLOOR_RUNS


def _parent_and_cpu(stat: Path) -> tuple[int, float]:
    """A /proc/<pid>/stat's parent pid and CPU seconds (user + system) so far."""
    rest = stat.read_text().rsplit(")", 1)[1].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far."""
    return _parent_and_cpu(Path(f"/proc/{pid}/stat"))[1]


def wait_log(path: Path, text: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"lestrade run exited with {proc.returncode}")
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise TimeoutError(f"{text!r} not in {path}")


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        [str(binary_path("kubectl")), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout


class PhaseWatch:
    """`kubectl get inv -w` in the background: the phase of every run as it changes, and the
    moment the last one finished. One streaming watch instead of a `kubectl get` every second:
    each of those was a process listing every run, and its CPU came out of what the burst had."""

    def __init__(self, kubeconfig: Path, count: int) -> None:
        import threading

        self.count = count
        self.phases: dict[str, str] = {}
        self.finished: set[str] = set()
        self.finished_at: float | None = None
        self._done = threading.Event()
        self._proc = subprocess.Popen(
            [
                str(binary_path("kubectl")),
                "--kubeconfig",
                str(kubeconfig),
                "get",
                "inv",
                "-n",
                NAMESPACE,
                "-w",
                "--no-headers",
                "-o",
                "custom-columns=NAME:.metadata.name,PHASE:.status.phase",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = line.split()
            if len(parts) < 2:
                continue
            self.phases[parts[0]] = parts[1]
            if parts[1] in ("Succeeded", "Failed"):
                self.finished.add(parts[0])
            if len(self.finished) >= self.count and self.finished_at is None:
                self.finished_at = time.perf_counter()
                self._done.set()
        self._done.set()  # the watch ended: wait() reports it

    def wait(self, timeout: float) -> float:
        if not self._done.wait(timeout) or self.finished_at is None:
            raise TimeoutError(f"{len(self.finished)}/{self.count} finished")
        return self.finished_at

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def cpu_seconds(root: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of `lestrade run` and every process under it, by what
    it is: the operator, the API, kube-apiserver, etcd, ... (a figure the machine's other load
    inflates less than the wall time)."""
    stats: dict[int, tuple[int, float, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent, seconds = _parent_and_cpu(stat)
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue  # a process that ended meanwhile
        args = [a.decode(errors="replace") for a in argv if a]
        text = " ".join(args)
        name = next((n for n in ("operator", "api") if f"lestrade.{n}" in text), Path(args[0]).name if args else "?")
        stats[int(stat.parent.name)] = (parent, seconds, name)
    out: dict[str, float] = {}
    for pid, (_, seconds, name) in stats.items():
        ancestor = pid
        while ancestor in stats and ancestor != root:
            ancestor = stats[ancestor][0]
        if ancestor == root:
            out[name] = out.get(name, 0.0) + seconds
    return out


def apiserver_requests(kubeconfig: Path) -> dict[str, float]:
    """`apiserver_request_total` by verb and resource (subresource): what the apiserver served."""
    import re

    out: dict[str, float] = {}
    for line in kubectl(kubeconfig, "get", "--raw", "/metrics").splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        key = f"{labels.get('verb')} {labels.get('resource')}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def timeline(kubeconfig: Path) -> dict[str, list[float]]:
    """Per run: seconds from its creation to its start, and from its start to its end."""
    from datetime import datetime

    items = json.loads(kubectl(kubeconfig, "get", "inv", "-n", NAMESPACE, "-o", "json"))["items"]

    def at(value: str) -> float:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()

    waits, runs = [], []
    for item in items:
        status = item.get("status") or {}
        if status.get("startTime") and status.get("completionTime"):
            waits.append(at(status["startTime"]) - at(item["metadata"]["creationTimestamp"]))
            runs.append(at(status["completionTime"]) - at(status["startTime"]))
    return {"wait": sorted(waits), "run": sorted(runs)}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"median {pick(0.5):.1f} s, p90 {pick(0.9):.1f} s, max {values[-1]:.1f} s"


def manifests(count: int) -> str:
    docs = [
        {
            "apiVersion": "lestrade.dev/v1alpha1",
            "kind": "Investigation",
            "metadata": {"name": f"burst-{i:04d}", "namespace": NAMESPACE},
            "spec": {"title": f"burst {i}", "subject": {"kind": "Pod", "name": POD}},
        }
        for i in range(count)
    ]
    return yaml.safe_dump_all(docs)


def first_chat(api_port: int) -> float:
    """Seconds one chat takes, the model answering at once: what a newcomer's first question
    waits for beyond the model (the API, the Conversation, the operator's run)."""
    chat = urllib.request.Request(
        f"http://127.0.0.1:{api_port}/api/chat",
        method="POST",
        data=json.dumps({"ask": "Is anything wrong in default?", "model": FIRST_CHAT}).encode(),
        headers={"Content-Type": "application/json"},
    )
    began = time.perf_counter()
    with urllib.request.urlopen(chat, timeout=300) as response:
        json.load(response)
    return time.perf_counter() - began


def through_make_run(server: ModelServerProcess, name: str, count: int, folder: Path) -> dict[str, Any]:
    models = folder / "models.yaml"
    models.write_text(
        yaml.safe_dump({name: server.litellm_params(name), FIRST_CHAT: server.litellm_params(FIRST_CHAT)})
    )
    api_port = free_port()
    env = {
        **os.environ,
        "LESTRADE_MODEL_LIST": str(models),
        "LESTRADE_DEFAULT_MODEL": name,
        "LESTRADE_MAX_CONCURRENT_RUNS": str(count),
        "LESTRADE_API_PORT": str(api_port),
        "LESTRADE_APISERVER_PORT": str(free_port()),
    }
    log = (folder / "run.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lestrade.cli", "run"],
        cwd=folder,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # Ready as a newcomer sees it. It includes the operator's model client warm (its import
        # alone takes 3 s of CPU), as the floor is timed with litellm imported.
        wait_log(folder / "run.log", "Lestrade is running", 600, proc)
        chat = first_chat(api_port)
        kubeconfig = folder / ".lestrade" / "kubeconfig"
        kubectl(
            kubeconfig,
            "run",
            POD,
            "--image=registry.example.com/app:1",
            "-n",
            NAMESPACE,
            "--overrides",
            json.dumps(
                {"spec": {"tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}}
            ),
        )
        text = manifests(count)
        profile = os.environ.get("LESTRADE_BENCH_PROFILE")  # a py-spy to record the operator with
        spy = None
        if profile:
            # This run's operator, a child of this `lestrade run` (other sessions may run one too).
            pid = subprocess.run(
                ["pgrep", "-P", str(proc.pid), "-f", "lestrade.operator"], capture_output=True, text=True
            ).stdout.split()[0]
            spy = subprocess.Popen(
                [
                    profile,
                    "record",
                    "-p",
                    pid,
                    "-d",
                    "90",
                    "-r",
                    "50",
                    "-f",
                    "speedscope",
                    "--gil",
                    "-o",
                    str(folder / "operator.speedscope.json"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        cpu_before = cpu_seconds(proc.pid)
        requests_before = apiserver_requests(kubeconfig)
        watch = PhaseWatch(kubeconfig, count)  # `kubectl get inv -w`, as the README tells users
        started = time.perf_counter()
        kubectl(kubeconfig, "apply", "-f", "-", stdin=text)
        applied = time.perf_counter() - started
        try:
            finished = watch.wait(timeout=900)
        finally:
            watch.stop()
        wall = finished - started
        phases = list(watch.phases.values())
        cpu_after = cpu_seconds(proc.pid)
        requests_after = apiserver_requests(kubeconfig)
        served = {k: v - requests_before.get(k, 0.0) for k, v in requests_after.items()}
        cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items() if v - cpu_before.get(k, 0.0) >= 0.05}
        failed = phases.count("Failed")
        if spy is not None:
            spy.wait(timeout=200)
        return {
            "apply": applied,
            "wall": wall,
            "failed": failed,
            "first_chat": chat,
            "cpu": cpu,
            "served": served,
            **timeline(kubeconfig),
        }
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="makerun-burst-"))
    name = "makerun-burst"
    server = ModelServerProcess(
        [scenario(name), Scenario(name=FIRST_CHAT, steps=[Step(content="Nothing is wrong.", latency_ms=0)])], folder
    )
    load_before = f"{os.getloadavg()[0]:.1f}"
    try:
        minimal, floor_model_cpu = floors(server, lambda: bare_floor(server, name, args.count))
        floor, floor_cpu = minimal[len(minimal) // 2]
        floor_requests = len(server.requests(name))
        model_cpu = process_cpu(server.proc.pid)
        run = through_make_run(server, name, args.count, folder)
        run_model_cpu = process_cpu(server.proc.pid) - model_cpu  # the burst (and the first chat)
        runs = by_run(server.requests(name)[floor_requests:])
        replays, replay_model_cpu = floors(server, lambda: replay_floor(server, name, runs))
        replay, replay_cpu = replays[len(replays) // 2]
    finally:
        server.stop()
    ratio, minimal_ratio = run["wall"] / replay, run["wall"] / floor
    print(
        f"first chat once `lestrade run` is ready (the model answers at once; {_load()}): "
        f"{run['first_chat']:.2f} s (target <= 1 s plus the model's own time)"
    )
    print(
        f"burst through `make run`: {args.count} Investigations (4 model calls of {LATENCY_MS} ms, "
        "3 Kubernetes reads each)"
    )
    calls = sum(len(bodies) for bodies in runs)
    print(
        f"  bare litellm floor, the burst's own {calls} requests:  {replay:6.1f} s (its litellm client: "
        f"{replay_cpu:.1f} CPU s; median of {FLOOR_RUNS}: " + ", ".join(f"{wall:.1f}" for wall, _ in replays) + " s)"
    )
    print(
        f"  bare litellm floor, minimal requests:              {floor:6.1f} s (a one-line prompt, no tools; "
        f"its litellm client: {floor_cpu:.1f} CPU s; median of {FLOOR_RUNS}: "
        + ", ".join(f"{wall:.1f}" for wall, _ in minimal)
        + " s)"
    )
    print(
        f"  kubectl apply -> all finished:                     {run['wall']:6.1f} s "
        f"(apply itself {run['apply']:.1f} s; failed {int(run['failed'])})"
    )
    print(f"  each run, creation to start: {spread(run['wait'])}; start to end: {spread(run['run'])}")
    cpu = sorted(run["cpu"].items(), key=lambda kv: -kv[1])
    print("  CPU seconds during the burst: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu))
    print(
        f"  the scripted model server's CPU seconds (on this machine, unlike a provider's): floors {floor_model_cpu:.1f} "
        f"(minimal) and {replay_model_cpu:.1f} (replayed), burst {run_model_cpu:.1f}"
    )
    served = sorted(((k, v) for k, v in run["served"].items() if v >= args.count / 4), key=lambda kv: -kv[1])
    print(
        f"  apiserver requests during the burst (>= {args.count // 4}): "
        + ", ".join(f"{name} {int(n)}" for name, n in served)
    )
    print(
        f"  load average before/after: {load_before} / {os.getloadavg()[0]:.1f} (2 cores; other work inflates the times)"
    )
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"  ratio to the floor of the same requests: {ratio:.1f}x (target <= {TARGET}x: {verdict}; goal <= {GOAL}x)")
    print(f"  ratio to the floor of minimal requests: {minimal_ratio:.1f}x")
    print(f"  logs: {folder}/.lestrade/logs/")
    return 0 if run["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
