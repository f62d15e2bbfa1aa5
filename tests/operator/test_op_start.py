"""The operator imports what it needs when it needs it (issue #11: cold start <= 2 s, RSS idle
<= 150 MiB; the figures are in bench/burst_bench.py, never in a test)."""

from __future__ import annotations

import json
import subprocess
import sys

LATE = ("litellm", "httpx", "bashlex", "jinja2", "rich")
"""Imported at the first model call, Prometheus query, bash command or alert template."""


def test_starting_the_operator_imports_no_model_client_nor_tool_parsers() -> None:
    probe = (
        "import json, sys, lestrade.operator.__main__; "
        f"print(json.dumps(sorted(m for m in {list(LATE)!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
