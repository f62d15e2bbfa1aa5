"""The operator's own settings, read from the environment (the chart sets them) or flags.

They are in one frozen object so a test can start an operator with a concurrency of 2 or a
50 ms status interval without touching the environment of the test process.

| variable | default | meaning |
|---|---|---|
| `LESTRADE_MAX_CONCURRENT_RUNS` | 10 | investigations running at once per operator; the rest wait in Pending |
| `LESTRADE_DEFAULT_TIMEOUT` | 30m | run timeout when `spec.timeout` is not set |
| `LESTRADE_DEFAULT_MAX_STEPS` | 20 | model calls when `spec.maxSteps` is not set |
| `LESTRADE_STATUS_INTERVAL` | 0.3 | seconds between coalesced status patches of one run |
| `LESTRADE_STATUS_PATCHES_PER_SECOND` | 50 | progress patches of all runs together (the interval stretches) |
| `LESTRADE_TRANSCRIPT_CHUNK_BYTES` | 524288 | most bytes in one transcript ConfigMap |
| `LESTRADE_JOB_MODE` | false | run each investigation as a Kubernetes Job instead of in the operator |
| `LESTRADE_JOB_NAMESPACE` | the operator's namespace | where the Jobs run |
| `LESTRADE_JOB_IMAGE` | - | image of the Jobs (the operator's image) |
| `LESTRADE_JOB_SERVICE_ACCOUNT` | - | service account of the Jobs' pods |
| `LESTRADE_JOB_POD_TEMPLATE` | - | YAML file with a pod spec to start from (volumes, env, resources) |
| `LESTRADE_CLUSTER_NAME` | - | cluster name told to the model |
| `LESTRADE_PROMETHEUS_URL` | - | enables the Prometheus tools |
| `LESTRADE_ENABLE_WRITE_TOOLS` | false | offers the write actions (each call needs approval) |
| `LESTRADE_ENABLE_BASH` | true | offers the bash tool |
| `LESTRADE_RUNBOOK_DIRS` | - | folders of runbooks, separated by `:` |
| `LESTRADE_RUNBOOK_NAMESPACES` | the operator's namespace | the only namespaces whose ConfigMaps labelled `lestrade.dev/runbook=true` are runbooks, separated by `,` |
| `LESTRADE_METRICS_PORT` | 0 | serve Prometheus metrics on this port (`/metrics`); 0: not served |
| `LESTRADE_TOOLS_SERVICE_ACCOUNT` | - | `[namespace/]name` of the read-only ServiceAccount the tools act as (the operator mints its tokens); unset: the Kubernetes tools use the operator's own client and bash's kubectl has no credentials |
| `LESTRADE_NAMESPACE_SPEND_LIMIT` | - | spend limit of every namespace without a `lestrade.dev/spend-limit` annotation, e.g. `tokens=500000,cost=20,window=24h` |
| `LESTRADE_SCHEDULE_RECHECK` | 10 | seconds between a ScheduledInvestigation's rounds when nothing is due |
| `LESTRADE_EVENT_BATCH_SECONDS` | 1 | Warning Events are collected this long before they are matched against AlertRoutes |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lestrade.resources.common import parse_duration

__all__ = ["OperatorSettings", "PASSED_TO_JOBS"]

# Settings a Job's pod needs to behave like the operator (never credentials: those reach the
# Job through the pod template, as references to Secrets).
PASSED_TO_JOBS = (
    "LESTRADE_MODEL_LIST",
    "LESTRADE_DEFAULT_MODEL",
    "LESTRADE_DEMO_MODEL_URL",
    "LESTRADE_DEFAULT_TIMEOUT",
    "LESTRADE_DEFAULT_MAX_STEPS",
    "LESTRADE_STATUS_INTERVAL",
    "LESTRADE_TRANSCRIPT_CHUNK_BYTES",
    "LESTRADE_CLUSTER_NAME",
    "LESTRADE_PROMETHEUS_URL",
    "LESTRADE_ENABLE_WRITE_TOOLS",
    "LESTRADE_ENABLE_BASH",
    "LESTRADE_RUNBOOK_DIRS",
    "LESTRADE_RUNBOOK_NAMESPACES",
    "LESTRADE_TOOLS_SERVICE_ACCOUNT",
    "ENABLED_PROMPTS",
)

_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _own_namespace(env: Mapping[str, str]) -> str:
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        return _NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"


def _qualified(service_account: str | None, env: Mapping[str, str]) -> str | None:
    if not service_account:
        return None
    return service_account if "/" in service_account else f"{_own_namespace(env)}/{service_account}"


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class OperatorSettings:
    concurrency: int = 10
    default_timeout: float = 1800.0
    default_max_steps: int = 20
    status_interval: float = 0.3
    status_patches_per_second: float = 50.0
    chunk_limit: int = 512 * 1024
    job_mode: bool = False
    job_namespace: str = "default"
    job_image: str | None = None
    job_service_account: str | None = None
    job_pod_template: dict[str, Any] = field(default_factory=dict)
    job_env: dict[str, str] = field(default_factory=dict)
    """Environment passed to the Jobs' container (PASSED_TO_JOBS from the operator's own)."""
    cluster_name: str | None = None
    prometheus_url: str | None = None
    enable_write_tools: bool = False
    enable_bash: bool = True
    runbook_dirs: tuple[str, ...] = ()
    runbook_namespaces: tuple[str, ...] = ()
    """Never a tenant's: a runbook is an instruction the model follows."""
    tools_service_account: str | None = None
    """`namespace/name` of the tools' read-only ServiceAccount (see tools_identity.py)."""
    metrics_port: int = 0
    """Port of the Prometheus metrics (0: not served)."""
    namespace_spend_limit: str = ""
    """Spend limit of every namespace without its own `lestrade.dev/spend-limit` annotation,
    e.g. `tokens=500000,cost=20,window=24h` (budgets.py); empty: none."""
    schedule_recheck: float = 10.0
    """Seconds between a ScheduledInvestigation's rounds when no time is due (to follow its
    runs and spec edits); as often as the CronJob controller looks."""
    event_batch_seconds: float = 1.0
    """Warning Events are collected this long and dispatched to the AlertRoutes together
    (event_source.py): one listing and one status update per route per burst."""
    spend_ledger_namespace: str = "default"
    """Where the per-namespace spend ledgers live: the operator's namespace, out of tenants' reach."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> OperatorSettings:
        env = dict(os.environ if env is None else env)
        template: dict[str, Any] = {}
        if env.get("LESTRADE_JOB_POD_TEMPLATE"):
            template = yaml.safe_load(Path(env["LESTRADE_JOB_POD_TEMPLATE"]).read_text()) or {}
        passed = {key: env[key] for key in PASSED_TO_JOBS if env.get(key)}
        values: dict[str, Any] = {
            "concurrency": int(env.get("LESTRADE_MAX_CONCURRENT_RUNS", "10")),
            "default_timeout": parse_duration(env.get("LESTRADE_DEFAULT_TIMEOUT", "30m")),
            "default_max_steps": int(env.get("LESTRADE_DEFAULT_MAX_STEPS", "20")),
            "status_interval": float(env.get("LESTRADE_STATUS_INTERVAL", "0.3")),
            "status_patches_per_second": float(env.get("LESTRADE_STATUS_PATCHES_PER_SECOND", "50")),
            "chunk_limit": int(env.get("LESTRADE_TRANSCRIPT_CHUNK_BYTES", str(512 * 1024))),
            "job_mode": _flag(env.get("LESTRADE_JOB_MODE")),
            "job_namespace": env.get("LESTRADE_JOB_NAMESPACE") or _own_namespace(env),
            "job_image": env.get("LESTRADE_JOB_IMAGE") or None,
            "job_service_account": env.get("LESTRADE_JOB_SERVICE_ACCOUNT") or None,
            "job_pod_template": template,
            "job_env": passed,
            "cluster_name": env.get("LESTRADE_CLUSTER_NAME") or None,
            "prometheus_url": env.get("LESTRADE_PROMETHEUS_URL") or None,
            "enable_write_tools": _flag(env.get("LESTRADE_ENABLE_WRITE_TOOLS")),
            "enable_bash": _flag(env.get("LESTRADE_ENABLE_BASH", "true")),
            "runbook_dirs": tuple(d for d in env.get("LESTRADE_RUNBOOK_DIRS", "").split(":") if d),
            "runbook_namespaces": tuple(n.strip() for n in env.get("LESTRADE_RUNBOOK_NAMESPACES", "").split(",")
                                        if n.strip()) or (_own_namespace(env),),
            "tools_service_account": _qualified(env.get("LESTRADE_TOOLS_SERVICE_ACCOUNT"), env),
            "metrics_port": int(env.get("LESTRADE_METRICS_PORT") or "0"),
            "namespace_spend_limit": env.get("LESTRADE_NAMESPACE_SPEND_LIMIT", ""),
            "spend_ledger_namespace": _own_namespace(env),
            "schedule_recheck": float(env.get("LESTRADE_SCHEDULE_RECHECK", "10")),
            "event_batch_seconds": float(env.get("LESTRADE_EVENT_BATCH_SECONDS", "1")),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values["concurrency"] < 1:
            raise ValueError("LESTRADE_MAX_CONCURRENT_RUNS must be at least 1")
        return cls(**values)
