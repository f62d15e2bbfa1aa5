"""Past findings over 10,000 finished runs (issue #26): what the search costs.

    .venv/bin/python bench/findings_bench.py [--count 10000] [--searches 200]

Builds `count` finished Investigations as the apiserver returns them (~1 KiB analysis,
sections, a subject, three tool calls; 20 namespaces, 400 workloads, 40 alert names) and
measures, in this process:

1. the API's index (`lestrade.api.base.findings.Findings` over objects as its shared watches
   hold them): the first search (indexes everything), a search after 100 runs changed (only
   those are read again), and the RSS the index adds beside the 150 MiB target of the API
   with 10,000 runs (many_bench.py measures the watches' own share);
2. search latency, median and p95 over `searches` queries of each shape: free text (BM25),
   involved resource (name with owner-prefix match), alert name, time range, free text
   limited to the namespaces a caller may read;
3. the agent's tool path (`search_findings` builds an index per call from its lists): indexing
   `count` listed objects and one search, and the RSS the index adds while it lives, beside
   the operator's 150 MiB target.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import os  # noqa: E402

from operator_bench import rss_kib  # noqa: E402

import lestrade  # noqa: E402,F401
from lestrade.api.base.findings import Findings  # noqa: E402
from lestrade.runs.history import FindingsIndex, SearchQuery  # noqa: E402

TARGET_RSS_MIB = 150
TARGET_SEARCH_MS = 50.0
WORDS = (
    "OOMKilled memory limit heap CrashLoopBackOff probe readiness liveness timeout DNS resolver "
    "certificate expired quota exceeded image pull backoff node pressure disk evicted connection "
    "refused upstream latency throttled CPU replica rollout stuck config missing secret mount "
    "permission denied port conflict scheduler unschedulable taint toleration volume attach"
).split()


def run_object(i: int, rng: random.Random) -> dict[str, Any]:
    ns = f"team-{i % 20:02d}"
    workload = f"svc-{rng.randrange(400):03d}"
    alert = f"Alert{rng.randrange(40):02d}"
    cause = " ".join(rng.choice(WORDS) for _ in range(24))
    analysis = f"## Conclusions and Possible Root Causes\n{cause}\n\n## Key Findings\n" + " ".join(
        rng.choice(WORDS) for _ in range(130)
    )
    done = 1_780_000_000 + i * 60
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(done))
    return {
        "kind": "Investigation",
        "metadata": {
            "name": f"run-{i:05d}",
            "namespace": ns,
            "resourceVersion": str(1000 + i),
            "creationTimestamp": stamp,
            "uid": f"uid-{i}",
        },
        "spec": {
            "title": f"{alert} on {workload}",
            "subject": {"kind": "Deployment", "name": workload, "namespace": ns},
            "context": {"alert": {"labels": {"alertname": alert}}},
        },
        "status": {
            "phase": "Succeeded",
            "completionTime": stamp,
            "analysis": analysis,
            "sections": {"Conclusions and Possible Root Causes": cause, "Next Steps": "raise the limit"},
            "toolCalls": [
                {
                    "id": f"c{k}",
                    "name": "kubectl_describe",
                    "status": "success",
                    "description": f"kubectl describe pod {workload}-abc{k}",
                    "params": {"kind": "pod", "name": f"{workload}-7d9f-abc{k}", "namespace": ns},
                }
                for k in range(3)
            ],
        },
    }


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def mark(value: float, target: float) -> str:
    return "within target" if value <= target else "OVER TARGET"


async def api_side(objects: dict[tuple[str, str], dict[str, Any]], searches: int, rng: random.Random) -> None:
    watches = {"investigations": SimpleNamespace(objects=objects), "conversations": SimpleNamespace(objects={})}
    findings = Findings(watches)  # type: ignore[arg-type]
    app = SimpleNamespace(state=SimpleNamespace())
    gc.collect()
    before = rss_kib(os.getpid())
    began = time.perf_counter()
    await findings.search(app, None, SearchQuery(text="OOMKilled"))
    first = time.perf_counter() - began
    gc.collect()
    added = (rss_kib(os.getpid()) - before) / 1024
    print(
        f"API: first search (indexes {len(objects)} runs): {first:.2f} s; index RSS +{added:.1f} MiB "
        f"(target for the whole API with 10,000 runs: {TARGET_RSS_MIB} MiB)"
    )
    for key in list(objects)[:100]:
        obj = objects[key]
        objects[key] = {
            **obj,
            "metadata": {**obj["metadata"], "resourceVersion": obj["metadata"]["resourceVersion"] + "x"},
        }
    began = time.perf_counter()
    await findings.search(app, None, SearchQuery(text="DNS"))
    print(f"API: search after 100 runs changed: {(time.perf_counter() - began) * 1000:.1f} ms")

    shapes = {
        "free text (BM25)": lambda: SearchQuery(text=" ".join(rng.choice(WORDS) for _ in range(3))),
        "involved resource": lambda: SearchQuery(kind="Deployment", name=f"svc-{rng.randrange(400):03d}"),
        "owner-prefix name": lambda: SearchQuery(name=f"svc-{rng.randrange(400):03d}-7d9f"),
        "alert name": lambda: SearchQuery(alert=f"Alert{rng.randrange(40):02d}"),
        "time range + text": lambda: SearchQuery(text=rng.choice(WORDS), since=1_780_000_000 + 300_000),
    }
    for label, make in shapes.items():
        samples = []
        for _ in range(searches):
            query = make()
            began = time.perf_counter()
            await findings.search(app, None, query)
            samples.append(time.perf_counter() - began)
        print(
            f"API search, {label}: {quantiles(samples)} ({mark(statistics.median(samples) * 1000, TARGET_SEARCH_MS)}"
            f" of {TARGET_SEARCH_MS:.0f} ms)"
        )
    index = findings._index
    allowed = [("Investigation", f"team-{k:02d}") for k in range(3)]
    samples = []
    for _ in range(searches):
        began = time.perf_counter()
        index.search(SearchQuery(text=rng.choice(WORDS)), readable=allowed)
        samples.append(time.perf_counter() - began)
    print(f"API search, free text in 3 readable namespaces: {quantiles(samples)}")


def agent_side(objects: list[dict[str, Any]]) -> None:
    gc.collect()
    before = rss_kib(os.getpid())
    began = time.perf_counter()
    index = FindingsIndex()
    for start in range(0, len(objects), 500):  # as the tool adds its listed pages
        index.add(objects[start : start + 500])
    built = time.perf_counter() - began
    result = index.search(SearchQuery(text="OOMKilled memory limit", name="svc-001"))
    total = time.perf_counter() - began
    grown = (rss_kib(os.getpid()) - before) / 1024
    print(
        f"agent tool: index {len(objects)} listed runs {built:.2f} s, with one search {total:.2f} s "
        f"({len(result)} results); RSS +{grown:.1f} MiB while the index lives (freed after the call; "
        f"the listed pages come and go 500 at a time) — operator target {TARGET_RSS_MIB} MiB"
    )
    del index


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(26)
    made = [run_object(i, rng) for i in range(args.count)]
    objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in made}
    print(
        f"{args.count} finished runs, {sum(len(o['status']['analysis']) for o in made) // args.count} "
        f"characters of analysis each; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        "(figures scale with it)"
    )
    asyncio.run(api_side(objects, args.searches, rng))
    agent_side(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
