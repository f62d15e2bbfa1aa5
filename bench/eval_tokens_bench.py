"""Tokens per scenario of the evidence suite, with the log digests and with raw log lines (issue #23).

    .venv/bin/python bench/eval_tokens_bench.py [--only a,b]

The scripted investigator follows each scenario's reference plan twice in one run, on one local
control plane: as written (the logs tools answer with digests, the crashed containers' by
default) and with every logs call asking for `raw: true` (the lines themselves, as the tools
answered before the digests). Per scenario: tokens (the run's `status.usage.totalTokens`, as the
scripted model server counts them) and evidence recall of both, side by side, so no saving is
bought with lost evidence.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import lestrade  # noqa: F401  (offline litellm/tiktoken first)
from lestrade.evals.__main__ import DEFAULT_SCENARIOS
from lestrade.evals.metrics import RecordedSeries, recorded_prometheus
from lestrade.evals.recall import Recall
from lestrade.evals.runner import Environment, run_scripted
from lestrade.evals.scenario import Scenario, load_scenarios

LOG_TOOLS = ("kubectl_logs", "kubectl_previous_logs")


def with_raw_logs(scenario: Scenario) -> Scenario:
    plan = [
        [
            call.model_copy(update={"args": {**call.args, "raw": True}}) if call.tool in LOG_TOOLS else call
            for call in turn
        ]
        for turn in scenario.plan
    ]
    return scenario.model_copy(update={"plan": plan})


async def measure(only: list[str] | None) -> tuple[list[Recall], list[Recall]]:
    from lestrade.localcluster.cluster import LocalCluster
    from lestrade.modelserver import ScriptedModelServer

    scenarios = load_scenarios(DEFAULT_SCENARIOS, only)
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lestrade-eval-tokens-")))
        cluster = stack.enter_context(LocalCluster.start(workdir / "cluster"))
        api_client = stack.enter_context(cluster.api_client())
        series = RecordedSeries()
        prometheus_url = stack.enter_context(recorded_prometheus(series))
        env = Environment(api_client, workdir, prometheus_url=prometheus_url, series=series, parallel=4)
        server = stack.enter_context(ScriptedModelServer(latency_ms=0))
        digest = await run_scripted(env, server, scenarios)
        raw = await run_scripted(env, server, [with_raw_logs(s) for s in scenarios])
    return digest, raw


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    args = parser.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()] or None
    digest, raw = asyncio.run(measure(only))
    raw_by_name = {r.scenario: r for r in raw}
    print("tokens per scenario of the evidence suite (scripted plans): log digests vs raw log lines")
    print(f"  {'scenario':<34} {'digest':>8} {'raw':>8} {'ratio':>6}  recall digest / raw")
    totals = [0, 0]
    for r in digest:
        other = raw_by_name[r.scenario]
        totals[0] += r.tokens
        totals[1] += other.tokens
        ratio = r.tokens / other.tokens if other.tokens else 0.0
        print(
            f"  {r.scenario:<34} {r.tokens:>8} {other.tokens:>8} {ratio:>6.2f}  "
            f"{r.reached}/{len(r.facts)} / {other.reached}/{len(other.facts)}"
        )
    covered = sum(r.covered for r in digest)
    print(
        f"  all scenarios: {totals[0]:,} vs {totals[1]:,} tokens "
        f"({totals[0] / totals[1]:.2f}x; target: tokens per investigation -40% against before the digests)"
    )
    print(f"evidence recall with digests: {covered}/{len(digest)} ({100 * covered / len(digest):.0f}%)")
    return 0 if covered == len(digest) else 1


if __name__ == "__main__":
    sys.exit(main())
