"""`python -m lestrade.evals` (`make eval`): the investigation scenario suite.

Without `--model`: the scripted investigator follows each scenario's reference plan through the
real operator and tools; prints the recall table and, last, `evidence recall: N/M (P%)`; exits
1 below 100%. With `--model NAME` (a LESTRADE_MODEL_LIST entry): the model investigates freely,
a judge (`--judge`, default the same model) scores each answer; writes `eval-report.json` and
`eval-report.md` (`--report DIR`), compared with `--compare` (an earlier JSON report).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from lestrade.config import ConfigError, load_model_list
from lestrade.evals.metrics import RecordedSeries, recorded_prometheus
from lestrade.evals.runner import Environment, run_model, run_scripted
from lestrade.evals.scenario import load_scenarios
from lestrade.evals.table import recall_percent, recall_table, summary_line

DEFAULT_SCENARIOS = Path(__file__).resolve().parents[2] / "eval" / "scenarios"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lestrade.evals", description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=Path, default=DEFAULT_SCENARIOS, help="folder of scenario folders")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--model", default="", help="a LESTRADE_MODEL_LIST entry: investigate freely and judge")
    parser.add_argument("--judge", default="", help="the judge's model list entry (default: --model)")
    parser.add_argument("--report", type=Path, default=Path("."), help="folder for eval-report.json/.md")
    parser.add_argument("--compare", type=Path, default=None, help="an earlier eval-report.json")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="use this cluster (with KWOK) instead of starting a local control plane",
    )
    parser.add_argument("--max-steps", type=int, default=20, help="model mode: steps per investigation")
    parser.add_argument("--parallel", type=int, default=4, help="scenarios staged at once")
    return parser


async def _main(args: argparse.Namespace) -> int:
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    scenarios = load_scenarios(args.scenarios, only or None)
    models = None
    if args.model:
        models = load_model_list()
        for name in (args.model, args.judge or args.model):
            models.get(name)  # unknown names fail before any cluster starts
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lestrade-eval-")))
        if args.kubeconfig:
            from kubernetes import config as k8s_config

            api_client = stack.enter_context(k8s_config.new_client_from_config(config_file=str(args.kubeconfig)))
        else:
            from lestrade.localcluster.cluster import LocalCluster

            print("eval: starting the local control plane ...", flush=True)
            cluster = stack.enter_context(LocalCluster.start(workdir / "cluster"))
            api_client = stack.enter_context(cluster.api_client())
        series = RecordedSeries()
        prometheus_url = stack.enter_context(recorded_prometheus(series))
        env = Environment(api_client, workdir, prometheus_url=prometheus_url, series=series, parallel=args.parallel)
        print(f"eval: {len(scenarios)} scenarios", flush=True)
        if models is not None:
            report = await run_model(
                env, scenarios, models, args.model, args.judge or args.model, max_steps=args.max_steps
            )
            return _write_reports(report, args)
        from lestrade.modelserver import ScriptedModelServer

        server = stack.enter_context(ScriptedModelServer(latency_ms=0))
        recalls = await run_scripted(env, server, scenarios)
    print(recall_table(recalls))
    print(summary_line(recalls))
    return 0 if recalls and recall_percent(recalls) == 100.0 else 1


def _write_reports(report: dict, args: argparse.Namespace) -> int:
    from lestrade.evals.judge import compare_reports, markdown_report

    comparison = None
    if args.compare:
        comparison = compare_reports(report, json.loads(args.compare.read_text()))
        report["comparison"] = comparison
    args.report.mkdir(parents=True, exist_ok=True)
    (args.report / "eval-report.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = markdown_report(report, comparison)
    (args.report / "eval-report.md").write_text(markdown)
    print(markdown)
    print(f"eval: reports in {args.report / 'eval-report.json'} and {args.report / 'eval-report.md'}")
    print(f"pass rate: {report['passed']}/{report['scenarios']} ({100 * report['pass_rate']:.0f}%)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("LiteLLM", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    logging.getLogger("kopf").setLevel(logging.CRITICAL)  # retries while the fresh apiserver warms up
    try:
        return asyncio.run(_main(args))
    except (ConfigError, ValueError) as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
