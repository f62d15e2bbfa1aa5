"""`python -m lestrade.operator`: the Investigation operator process.

Runs Kopf with the handlers of `handlers.py` until SIGINT or SIGTERM (Kopf stops the runs
gracefully; whatever they were doing resumes from the transcript next time). Cluster-wide by
default, or only in the namespaces given with `--namespace`.

Several replicas can run at once. With `--replicas shared` (LESTRADE_REPLICAS=shared) they
share the work: each holds a Lease (`membership.py`) and runs the objects it claims
(`ownership.py`); Kopf peering is off. Otherwise (`standby`, the default, and the only mode for
Job mode) they are Kopf peers: the one that started first works, the others stand by and take
over when its keep-alive expires (`--peering`, default: use the `lestrade` peering object when
its CRD exists, else run standalone). `--liveness` serves Kopf's health
endpoint for the liveness and readiness probes (ready once the model client is warm:
`readiness.py`); `LESTRADE_METRICS_PORT` the Prometheus metrics (`metrics.py`).
"""

from __future__ import annotations

import gc
import importlib
import threading


def start_model_client_import() -> threading.Thread:
    """Starts litellm's import (seconds of CPU) in a thread: `python -m` does, first thing,
    before Kopf's and the Kubernetes client's imports, so it overlaps with them and with
    connecting and listing (issue #28; `bench/restart_bench.py`). `agent/model.py`'s loader
    finds it done or waits for it; the health endpoint says ready once it is warm (`readiness.py`).

    Python's cyclic garbage collector is paused until the import ends: it ran some 800 times
    over the half a million objects the start creates (a fifth of the import's CPU), which are
    modules, classes and tables that live as long as the process. They are then frozen
    (`gc.freeze`: later collections skip them; the 3,000 start-up objects that were already
    garbage stay, a one-time ~5 MiB, where collecting them first would cost a full collection,
    0.3 s of CPU) and the collector runs again."""

    def run() -> None:
        try:  # agent/model.py's MODEL_CLIENT_MODULES (third-party only: no import of ours races)
            importlib.import_module("litellm")
            importlib.import_module("openai.resources")
        except Exception:  # the first model call imports them again and reports why
            pass
        finally:
            gc.freeze()
            gc.enable()

    gc.disable()
    thread = threading.Thread(target=run, name="import litellm", daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":  # `python -m lestrade.operator`, not an import (tests, the Job entrypoint)
    from lestrade.operator.base.settings import OperatorSettings

    try:  # read once per process: main() adds the command line's flags to these
        _ENVIRONMENT: OperatorSettings | None = OperatorSettings.from_env()
    except Exception:  # main() reads them again and reports the setting (or model list) that is wrong
        _ENVIRONMENT = None
    if _ENVIRONMENT is not None and _ENVIRONMENT.runs.warm_model_client:
        start_model_client_import()

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import kopf
import uvloop
from kubernetes import client as k8s

from lestrade.config import ModelList, load_model_list
from lestrade.decision_links import load_key
from lestrade.kube import Kube
from lestrade.operator.admission.decisions import install_admission_policy
from lestrade.operator.admission.requester import install_requester_policy
from lestrade.operator.agent.warmup import warm_up
from lestrade.operator.base.engine import ToolsFactory
from lestrade.operator.base.metrics import serve as serve_metrics
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.base.telemetry import configure_tracing
from lestrade.operator.context import build_engine
from lestrade.operator.delivery.watch import DeliveryWatch
from lestrade.operator.handlers import OperatorContext, build_registry, configure_kopf
from lestrade.operator.readiness import require_warm_model_client
from lestrade.operator.replicas.membership import Membership
from lestrade.operator.runs.idle import IdleWaker
from lestrade.operator.runs.selection import configure_selection, crd_selects_phase

__all__ = ["run_operator", "main", "default_priority", "start_model_client_import"]

logger = logging.getLogger("lestrade.operator")


def default_priority() -> int:
    """Peering priority that favours the replica started first (it keeps working on restarts
    of the others, so a rolling update does not bounce the runs between pods)."""
    return int((4_000_000_000 - time.time()) * 1000)


def _connection_info(api_client: k8s.ApiClient) -> kopf.ConnectionInfo:
    """Kopf's credentials, taken from the same client configuration the operator uses."""
    cfg = api_client.configuration
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook(cfg)  # in-cluster: re-read the rotating service-account token
    keys = cfg.api_key or {}
    token = keys.get("authorization") or keys.get("BearerToken") or ""
    scheme, _, value = token.partition(" ") if " " in token else ("Bearer", "", token)
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme if value else None,
        token=value or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )


async def run_operator(
    settings: OperatorSettings,
    *,
    namespaces: Sequence[str] = (),
    standalone: bool | None = None,
    peering_name: str = "lestrade",
    mandatory_peering: bool = False,
    priority: int | None = None,
    peering_lifetime: int = 20,
    liveness_endpoint: str | None = None,
    models: ModelList | None = None,
    api_client: k8s.ApiClient | None = None,
    tools: ToolsFactory | None = None,
    install_policy: bool = False,
    stop_flag: Any = None,
    ready_flag: Any = None,
    session_factory: Callable[..., aiohttp.ClientSession] = aiohttp.ClientSession,
) -> None:
    """Runs the operator until stopped (signal, or `stop_flag` for embedded use)."""
    engine = build_engine(
        settings,
        models or settings.models or load_model_list(env={}),
        api_client=api_client,
        tools=tools,
        session_factory=session_factory,
    )
    # While Kopf connects and lists: resumed runs then call the model at once (warmup.py).
    warm = (
        asyncio.create_task(warm_up([m.settings for m in engine.models.models.values()]), name="warm model client")
        if settings.runs.warm_model_client
        else None
    )
    if install_policy:
        await install_admission_policy(engine.kube)
        await install_requester_policy(engine.kube)
    membership = None
    if settings.replicas.mode == "shared":
        # A client of its own: renewals must not queue behind the runs' requests for one of
        # the shared connections (in a burst of 200 runs they waited seconds, and fenced).
        lease_kube = Kube(engine.api_client, session_factory=session_factory)
        membership = Membership(
            lease_kube,
            namespace=settings.replicas.lease_namespace,
            group=settings.replicas.group,
            replica=settings.replicas.name,
            duration=settings.replicas.lease_duration,
            renew_deadline=settings.replicas.lease_renew_deadline,
            renew_interval=settings.replicas.lease_renew_interval,
        )
        await membership.start()
        standalone = True  # the replicas share the work: none of them may stand by
    ctx = OperatorContext.create(engine, membership)
    registry = build_registry(settings.jobs.enabled)
    if warm is not None:  # ready = able to answer at full speed (readiness.py)
        require_warm_model_client(registry, warm)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return _connection_info(engine.api_client)

    kopf_settings = kopf.OperatorSettings()
    configure_kopf(
        kopf_settings,
        peering_name=peering_name,
        priority=default_priority() if priority is None else priority,
        peering_lifetime=peering_lifetime,
    )
    kopf_settings.peering.mandatory = mandatory_peering
    selectable = await crd_selects_phase(engine.kube)
    idle = settings.runs.select_idle_conversations and not settings.jobs.enabled
    configure_selection(kopf_settings, job_mode=settings.jobs.enabled, selectable=selectable, idle_conversations=idle)
    stop_metrics = serve_metrics(settings.telemetry.metrics_port) if settings.telemetry.metrics_port else None
    collector = asyncio.create_task(_collect_identities(engine), name="scope identity collector")
    waker = asyncio.create_task(
        IdleWaker(engine.kube).follow(namespaces) if idle else asyncio.sleep(0), name="idle conversations"
    )
    reaper = asyncio.create_task(ctx.reaper.follow(namespaces, selective=selectable), name="ttl reaper")
    # Results to Destinations: a watch of its own, outside the runs (a destination that is
    # down never holds a run up). Every replica runs it; claims in status keep sends single.
    delivery = DeliveryWatch(
        engine.kube,
        timeout=settings.delivery.timeout,
        console_url=settings.delivery.console_url,
        api_url=settings.delivery.api_url,
        decision_key=load_key(settings.delivery.decision_key_file),
    )
    deliverer = asyncio.create_task(delivery.follow(namespaces), name="delivery")

    @kopf.on.cleanup(registry=registry)
    async def stop_ttl_reaper(**_: Any) -> None:
        # Stopped with Kopf's own activities: its watch tasks were created after Kopf started,
        # so Kopf would otherwise count them as hung and wait 5 s before cancelling them.
        for task in (reaper, deliverer, collector, waker):
            task.cancel()
        await asyncio.gather(reaper, deliverer, collector, waker, return_exceptions=True)

    try:
        await kopf.operator(
            registry=registry,
            settings=kopf_settings,
            memo=kopf.Memo(lestrade=ctx),
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            standalone=standalone,
            liveness_endpoint=liveness_endpoint,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if membership is not None:  # the runs have stopped: the others may take over now
            await membership.stop()
            await membership.kube.aclose()
        if stop_metrics is not None:
            await asyncio.to_thread(stop_metrics)
        background = [reaper, deliverer, collector, waker, *([warm] if warm is not None else [])]
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        ctx.reaper.close()
        await engine.aclose()


async def _collect_identities(engine: Any) -> None:
    """Deletes the per-scope accounts no run used for a while (at start, then every tenth of
    that time): `tenancy/scope_identity.py`. Nothing to do without tenancy."""
    collect = getattr(engine.tools, "collect_unused", None)
    if collect is None or not engine.settings.tenancy.scopes_namespace:
        return
    interval = max(60.0, engine.settings.tenancy.scope_identity_idle / 10)
    while True:
        try:
            removed = await asyncio.to_thread(collect, engine.api_client)
            if removed:
                logger.info("removed %d unused per-scope tools identities", len(removed))
        except Exception as exc:  # next round; a missing right is the chart's to grant
            logger.warning("collecting unused per-scope identities failed: %s", exc)
        await asyncio.sleep(interval)  # a period, not a synchronization


def _environment() -> OperatorSettings:
    """The environment's settings, read once per process: `python -m` read them at the top of
    this module, before anything else (they say whether to start litellm's import); else now.
    Each reading reads the Job pod template and the model list files."""
    early = globals().get("_ENVIRONMENT")
    return early if isinstance(early, OperatorSettings) else OperatorSettings.from_env()


def main(argv: list[str] | None = None, *, tools: ToolsFactory | None = None) -> int:
    """The command line; `tools` replaces the product's tool registry (tests add their own)."""
    environment = _environment()
    defaults = environment.process
    parser = argparse.ArgumentParser(prog="python -m lestrade.operator", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch only this namespace (repeatable; default: all namespaces, or LESTRADE_WATCH_NAMESPACES=a,b)",
    )
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument("--standalone", action="store_true", help="no peering with other replicas")
    peering.add_argument("--peering", metavar="NAME", help="peer with replicas through this peering object (mandatory)")
    parser.add_argument(
        "--replicas",
        choices=["standby", "shared"],
        default=None,
        help="shared: replicas split the work (Leases and claims); standby: Kopf peering, one "
        "works (LESTRADE_REPLICAS, default standby)",
    )
    parser.add_argument("--priority", type=int, default=None, help="peering priority (default: earlier start wins)")
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        metavar="SECONDS",
        default=defaults.peering_lifetime,
        help="standby: seconds without the active peer's keep-alive before another takes over "
        "(LESTRADE_PEERING_LIFETIME, default 20)",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        default=defaults.liveness,
        help="serve Kopf's health endpoint, e.g. http://0.0.0.0:8081/healthz",
    )
    parser.add_argument("--concurrency", type=int, default=None, help="concurrent runs (LESTRADE_MAX_CONCURRENT_RUNS)")
    parser.add_argument(
        "--job-mode", action="store_true", default=None, help="run each investigation as a Job (LESTRADE_JOB_MODE)"
    )
    parser.add_argument(
        "--install-admission-policy",
        action=argparse.BooleanOptionalAction,
        default=defaults.install_admission_policy,
        help="apply the spec.decisions admission policy at start (needs the right to; the chart ships it instead)",
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    if args.peering_lifetime < 1:
        parser.error("--peering-lifetime: must be at least 1 second")

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("kopf.objects", "LiteLLM", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING if not args.verbose else logging.DEBUG)

    settings = environment.with_overrides(
        process={
            "watch_namespaces": tuple(args.namespace) or None,
            "peering_lifetime": args.peering_lifetime,
            "liveness": args.liveness,
            "install_admission_policy": args.install_admission_policy,
        },
        runs={"concurrency": args.concurrency},
        jobs={"enabled": args.job_mode},
        replicas={"mode": args.replicas},
    )
    namespaces = list(settings.process.watch_namespaces)
    stop_tracing = configure_tracing(settings.tracing)  # off unless the OTEL_* variables ask for it
    try:
        _run(args, settings, namespaces, tools)
    finally:
        if stop_tracing is not None:
            stop_tracing()  # sends the spans still buffered
    return 0


def _run(
    args: argparse.Namespace, settings: OperatorSettings, namespaces: list[str], tools: ToolsFactory | None
) -> None:
    # uvloop: the operator's one thread carries every run's model calls, Kubernetes requests and
    # Kopf's watch events; asyncio's own loop spent a tenth of that thread on its selector and
    # sockets in a burst of runs (`bench/makerun_burst_bench.py`).
    process = settings.process
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(
            run_operator(
                settings,
                namespaces=namespaces,
                standalone=True if args.standalone else None,
                peering_name=args.peering or process.peering_name,
                mandatory_peering=bool(args.peering),
                priority=args.priority,
                peering_lifetime=process.peering_lifetime,
                liveness_endpoint=process.liveness,
                tools=tools,
                install_policy=process.install_admission_policy,
            )
        )


if __name__ == "__main__":
    sys.exit(main())
