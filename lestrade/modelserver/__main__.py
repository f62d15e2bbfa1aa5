"""`python -m lestrade.modelserver`: serve the scripted model (the demo scenario by default).

`make run` starts this when no model list is configured; the default address matches the demo
fallback in `lestrade.config` (http://127.0.0.1:8765/v1, model `openai/demo`).
"""

from __future__ import annotations

import argparse
import sys

from lestrade.modelserver.scenario import load_scenarios
from lestrade.modelserver.server import ScriptedModelServer

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lestrade.modelserver", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--scenario-file",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML/JSON scenario file to serve as well (repeatable)",
    )
    parser.add_argument("--latency-ms", type=int, default=0, help="default delay before answers")
    args = parser.parse_args(argv)
    try:
        scenarios = [s for path in args.scenario_file for s in load_scenarios(path)]
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = ScriptedModelServer(scenarios, latency_ms=args.latency_ms, host=args.host, port=args.port)
    names = ", ".join(server.scenario_names)
    print(f"scripted model server on http://{args.host}:{args.port}/v1 (scenarios: {names})", flush=True)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
