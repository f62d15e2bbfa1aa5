"""Helpers of the plugin tests: the plugin run as a subprocess (its console script) with a
kubeconfig, and RBAC grants for ServiceAccounts."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from lestrade.resources import GROUP

__all__ = ["PLUGIN", "Result", "run_plugin", "grant"]

PLUGIN = Path(sys.executable).parent / "kubectl-lestrade"


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_plugin(kubeconfig: Path | str, namespace: str, *args: str, stdin: str = "", env: dict[str, str] | None = None,
               command: list[str] | None = None, timeout: float = 120) -> Result:
    """`kubectl-lestrade ARGS -n NAMESPACE` with that kubeconfig (`command` replaces the
    executable, e.g. with kubectl itself)."""
    done = subprocess.run(
        [*(command or [str(PLUGIN)]), *args, "-n", namespace],
        input=stdin, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "KUBECONFIG": str(kubeconfig), **(env or {})},
    )
    return Result(done.returncode, done.stdout, done.stderr)


def grant(api_client: Any, namespace: str, account: str, rules: list[tuple[str, list[str]]]) -> None:
    """A Role of (resource, verbs) rules in lestrade.dev for the ServiceAccount `account`."""
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(namespace, k8s.V1Role(
        metadata=k8s.V1ObjectMeta(name=account),
        rules=[k8s.V1PolicyRule(api_groups=[GROUP], resources=[r], verbs=v) for r, v in rules],
    ))
    rbac.create_namespaced_role_binding(namespace, k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name=account),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=account),
        subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=account, namespace=namespace)],
    ))
