"""`python -m lestrade.localcluster build|up|versions`.

`build` fills the binary cache (what `make test` does first, so build time is reported apart
from test time); `up` runs a control plane in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from lestrade.localcluster.build import ALL_COMPONENTS, BuildError, cache_root, ensure_binaries
from lestrade.localcluster.cluster import LocalCluster
from lestrade.localcluster.otelcol import OTELCOL_VERSION, OtelcolBuildError
from lestrade.localcluster.processes import StartupError
from lestrade.localcluster.prometheus import PROMETHEUS_VERSION, PrometheusBuildError
from lestrade.localcluster.versions import COMPONENTS, RUN_COMPONENTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lestrade.localcluster")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build (or find cached) control-plane binaries")
    build.add_argument(
        "components",
        nargs="*",
        help=f"components or binaries (default: what `make run` starts: {', '.join(RUN_COMPONENTS)})",
    )
    build.add_argument("--all", action="store_true", help=f"every pinned component: {', '.join(ALL_COMPONENTS)}")
    up = sub.add_parser("up", help="run a local control plane until Ctrl-C")
    up.add_argument("--kubeconfig", type=Path, default=Path(".lestrade/kubeconfig"))
    sub.add_parser("versions", help="print the pinned versions and the cache folder")
    args = parser.parse_args(argv)

    try:
        if args.command == "build":
            started = time.monotonic()
            names = list(ALL_COMPONENTS) if args.all else (args.components or None)
            for binary, path in ensure_binaries(names).items():
                print(f"{binary}: {path}")
            print(f"ready in {time.monotonic() - started:.1f}s")
        elif args.command == "versions":
            for c in COMPONENTS.values():
                print(f"{c.name} {c.version} ({c.module})")
            print(f"prometheus {PROMETHEUS_VERSION} (github.com/prometheus/prometheus)")
            print(f"otelcol {OTELCOL_VERSION} (go.opentelemetry.io/collector + contrib fileexporter)")
            print(f"cache: {cache_root()}")
        else:
            return _up(args.kubeconfig)
    except (BuildError, PrometheusBuildError, OtelcolBuildError, StartupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _up(kubeconfig: Path) -> int:
    started = time.monotonic()
    cluster = LocalCluster.start(kubeconfig=kubeconfig.resolve())
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"control plane up in {time.monotonic() - started:.1f}s at {cluster.server}")
    print(f"  export KUBECONFIG={kubeconfig.resolve()}")
    try:
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
