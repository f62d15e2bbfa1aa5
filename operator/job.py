"""The entrypoint of a Job's pod in scale-out mode (see `jobs.py`):

    python -m lestrade.operator.job --kind Investigation --namespace NS --name NAME

runs exactly one attempt of that resource (an Investigation, or a Conversation's current turn):
it resumes from the transcript, writes status as the operator would, and exits when the run
(or turn) ended or paused for approval.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from lestrade.operator.base.engine import ToolsFactory
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.base.telemetry import configure_tracing
from lestrade.resources.constants import INVESTIGATION_KIND
from lestrade.runs.views import KINDS

__all__ = ["main"]

logger = logging.getLogger(__name__)


async def _run(
    settings: OperatorSettings,
    kind: str,
    namespace: str,
    name: str,
    kubeconfig: str | None,
    tools: ToolsFactory | None = None,
) -> int:
    from lestrade.config import load_model_list
    from lestrade.kube import is_not_found, resource_path
    from lestrade.operator.base.recorder import EventRecorder
    from lestrade.operator.context import build_engine
    from lestrade.operator.runs.attempt import run_attempt

    engine = build_engine(settings, settings.models or load_model_list(env={}), kubeconfig, tools=tools)
    from lestrade.operator.mcpservers.reconcile import load_for_run

    engine.mcp.loader = lambda namespace, shared: load_for_run(engine, namespace, shared)
    view_class = KINDS[kind]
    try:
        try:
            body = await engine.kube.get(resource_path(view_class.plural, namespace, name))
        except Exception as exc:
            if is_not_found(exc):
                logger.info("%s %s/%s is gone; nothing to do", kind, namespace, name)
                return 0
            raise
        view = view_class(body)
        if not view.has_work():
            return 0
        if view.split_decisions()[1]:
            logger.info("%s %s/%s still waits for decisions", kind, namespace, name)
            return 0
        outcome, _ = await run_attempt(engine, body)
        logger.info("%s %s/%s: %s", kind, namespace, name, outcome.value)
        return 0
    finally:
        await EventRecorder.drain()
        await engine.aclose()


def main(argv: list[str] | None = None, *, tools: ToolsFactory | None = None) -> int:
    """The command line; `tools` replaces the product's tool registry (tests add their own)."""
    parser = argparse.ArgumentParser(
        prog="python -m lestrade.operator.job",
        description="Run one attempt of an Investigation or a Conversation turn until it ends "
        "or waits for approval (Job mode).",
    )
    parser.add_argument("--kind", default=INVESTIGATION_KIND, choices=sorted(KINDS))
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--kubeconfig", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = OperatorSettings.from_env()
    stop_tracing = configure_tracing(settings.tracing)  # the operator passes its OTEL_* endpoint on
    try:
        return asyncio.run(_run(settings, args.kind, args.namespace, args.name, args.kubeconfig, tools))
    finally:
        if stop_tracing is not None:
            stop_tracing()


if __name__ == "__main__":
    sys.exit(main())
