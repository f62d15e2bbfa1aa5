"""Helpers of the plugin tests: the plugin run as a subprocess (its console script) with a
kubeconfig, and RBAC grants for ServiceAccounts."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lestrade.testing.rbac import grant_lestrade_role as grant

__all__ = ["PLUGIN", "Result", "run_plugin", "grant"]

PLUGIN = Path(sys.executable).parent / "kubectl-lestrade"


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_plugin(
    kubeconfig: Path | str,
    namespace: str,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    timeout: float = 120,
) -> Result:
    """`kubectl-lestrade ARGS -n NAMESPACE` with that kubeconfig (`command` replaces the
    executable, e.g. with kubectl itself)."""
    done = subprocess.run(
        [*(command or [str(PLUGIN)]), *args, "-n", namespace],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "KUBECONFIG": str(kubeconfig), **(env or {})},
    )
    return Result(done.returncode, done.stdout, done.stderr)
