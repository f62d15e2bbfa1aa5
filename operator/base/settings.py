"""The operator's own settings, read from the environment (the chart sets them) or flags.

They are in one frozen object, grouped by what they govern (`settings.runs.concurrency`,
`settings.replicas.lease_duration`, ... as kopf groups its own), read from the environment once
by `OperatorSettings.from_env`: nothing else in the operator reads the environment. A test starts
an operator with a concurrency of 2 or a 50 ms status interval through overrides
(`runs={"concurrency": 2}`) without touching the environment of the test process.

| variable | default | meaning |
|---|---|---|
| `LESTRADE_MAX_CONCURRENT_RUNS` | 10 | investigations running at once per operator; the rest wait in Pending |
| `LESTRADE_DEFAULT_TIMEOUT` | 30m | run timeout when `spec.timeout` is not set |
| `LESTRADE_DEFAULT_MAX_STEPS` | 20 | model calls when `spec.maxSteps` is not set |
| `LESTRADE_STATUS_INTERVAL` | 0.3 | seconds between coalesced status patches (and read-only transcript writes) of one run |
| `LESTRADE_STATUS_PATCHES_PER_SECOND` | 10 | progress patches of all runs together (the interval stretches) |
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
| `LESTRADE_MCP_REFRESH` | 60 | seconds between listings of a Ready MCPServer's tools (a failing one is retried sooner, 1 s doubling up to this) |
| `LESTRADE_EVENT_BATCH_SECONDS` | 1 | Warning Events are collected this long before they are matched against AlertRoutes |
| `LESTRADE_REPLICAS` | standby | `shared`: every replica runs objects it claims (ownership.py); `standby`: Kopf peering, one replica works |
| `LESTRADE_REPLICA_NAME` | `POD_NAME`, else host-pid | this replica's name in its Lease and claims (shared mode); unique per live replica |
| `LESTRADE_REPLICA_GROUP` | lestrade | the Leases of replicas that share work carry this label value (one group per release) |
| `LESTRADE_LEASE_DURATION` | 20 | seconds without renewal after which a replica is dead for the others (shared mode) |
| `LESTRADE_LEASE_RENEW_DEADLINE` | 10 | a replica that could not renew for this long stops its runs (shorter than the duration) |
| `LESTRADE_LEASE_RENEW_INTERVAL` | 3 | seconds between renewals (and between looks at the other replicas' Leases) |
| `LESTRADE_CLAIM_HANDOFF` | 0.5 | seconds a replica leaves a new object to its preferred owner before claiming it |
| `LESTRADE_CONSOLE_URL` | - | base URL of the web console: delivered messages link to the run's page there (a Destination's `consoleUrl` wins) |
| `LESTRADE_API_URL` | - | the API's URL as webhook receivers reach it: firing webhook messages carry a signed `decisionUrl` there (with `LESTRADE_DECISION_KEY_FILE`) |
| `LESTRADE_DECISION_KEY_FILE` | - | file with the key that signs decision links (shared with the API) |
| `LESTRADE_DELIVERY_TIMEOUT` | 10 | seconds one delivery attempt may take; an attempt left `Sending` longer (its operator died) is tried again |
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from lestrade.config import ModelList, load_model_list
from lestrade.resources.common import parse_duration
from lestrade.triggers.reach import RoutePolicy

__all__ = [
    "OperatorSettings",
    "ProcessSettings",
    "RunSettings",
    "StatusSettings",
    "JobSettings",
    "ToolSettings",
    "TenancySettings",
    "SpendSettings",
    "TriggerSettings",
    "ReplicaSettings",
    "DeliverySettings",
    "TelemetrySettings",
    "PASSED_TO_JOBS",
]

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
    "LESTRADE_PROMETHEUS_NAMESPACE_LABEL",
    "LESTRADE_ALERTMANAGER_URL",
    "LESTRADE_ENABLE_WRITE_TOOLS",
    "LESTRADE_ENABLE_BASH",
    "LESTRADE_RUNBOOK_DIRS",
    "LESTRADE_RUNBOOK_NAMESPACES",
    "LESTRADE_TOOLS_SERVICE_ACCOUNT",
    "LESTRADE_SCOPES_NAMESPACE",
    "LESTRADE_TOOLS_READ_ROLE",
    "LESTRADE_SCOPE_POLICY",
    "ENABLED_PROMPTS",
    # Traces of the Jobs' runs go where the operator's go (headers, which may hold a token,
    # reach a Job only through its pod template).
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
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
class RunSettings:
    """How many runs, and how long each may take."""

    concurrency: int = 10
    """Runs at once per operator; the rest wait in Pending (each holds a model call and tools)."""
    default_timeout: float = 1800.0
    """Seconds a run may take when `spec.timeout` is not set: a stuck model never holds a slot forever."""
    default_max_steps: int = 20
    """Model calls when `spec.maxSteps` is not set: bounds the cost of a run that never concludes."""
    cluster_name: str | None = None
    """Told to the model, so its answer names the cluster an SRE knows."""
    select_idle_conversations: bool = True
    """Kopf watches only Conversations with something to answer (`runs/idle.py`); idle ones are
    labelled and leave the operator's memory (not in Job mode, which keeps full watches)."""
    warm_model_client: bool = True
    """Import litellm and prepare the configured models' client at start, in the background
    (`agent/warmup.py`): resumed runs and the first chat then call the model at once, at the
    price of litellm's memory (~90 MiB) in an idle operator; the health endpoint reports ready
    only once it is warm (`readiness.py`). LESTRADE_WARM_MODEL_CLIENT=false defers it to the
    first run (ready as soon as Kopf runs)."""


@dataclass(frozen=True)
class StatusSettings:
    """How a run's progress is written: its status and its transcript."""

    interval: float = 0.3
    """Seconds between coalesced status patches of one run: progress is visible without a
    write per token."""
    patches_per_second: float = 10.0
    """Progress patches of all runs together (the interval stretches): a burst of runs does
    not flood the apiserver. A status patch of a run costs the apiserver ~5 ms of CPU (the
    whole object is decoded, merged, validated with its CEL rules, encoded for etcd and for
    every watcher) and Kopf and the API another watch event each: 10 a second is a few percent
    of a core; a burst of 200 runs at 50 a second spent more CPU on progress than on the runs
    (`bench/makerun_burst_bench.py`). Up to 3 runs at once still see progress every 0.3 s;
    milestones (a Conversation turn's start, approvals, the end) are never held back. An
    Investigation's Running is progress too: a run that ends within the interval writes its
    status once. The same interval paces the transcript's writes of a turn that only reads
    (its calls and their results): what may have an effect is stored before it runs and its
    result at once."""
    transcript_chunk_bytes: int = 512 * 1024
    """Most bytes in one transcript ConfigMap: under the apiserver's 1 MiB object limit with room."""


@dataclass(frozen=True)
class JobSettings:
    """Job mode: each run in a Kubernetes Job instead of in the operator's process."""

    enabled: bool = False
    """Runs isolated from each other and from the operator (their own pod, limits, identity)."""
    namespace: str = "default"
    """Where the Jobs run: the operator's namespace unless set."""
    image: str | None = None
    """Image of the Jobs: the operator's own image."""
    service_account: str | None = None
    """Service account of the Jobs' pods (it needs only the run's resource and transcript)."""
    pod_template: dict[str, Any] = field(default_factory=dict)
    """A pod spec to start from (volumes, env, resources), from `LESTRADE_JOB_POD_TEMPLATE`."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment passed to the Jobs' container (PASSED_TO_JOBS from the operator's own): a Job
    must behave like the operator."""


@dataclass(frozen=True)
class ToolSettings:
    """What the model can use, beyond the Kubernetes reads every run has."""

    prometheus_url: str | None = None
    """Enables the Prometheus tools."""
    prometheus_namespace_label: str = "namespace"
    """The series label that names a series' namespace: scoped runs' PromQL is confined by it."""
    alertmanager_url: str | None = None
    """Alertmanager's base URL: the alerting tools read its active alerts and silences."""
    write_tools: bool = False
    """Offers the write actions (each call still needs a person's approval)."""
    bash: bool = True
    """Offers the bash tool (sandboxed, read-only commands run unattended)."""
    runbook_dirs: tuple[str, ...] = ()
    """Folders of runbooks the model may follow."""
    runbook_namespaces: tuple[str, ...] = ()
    """Never a tenant's: a runbook is an instruction the model follows."""
    mcp_refresh: float = 60.0
    """Seconds between listings of a Ready MCPServer's tools: new tools appear without a restart
    (a failing server is retried sooner, 1 s doubling up to this)."""


@dataclass(frozen=True)
class TenancySettings:
    """Whose eyes the tools read with."""

    tools_service_account: str | None = None
    """`namespace/name` of the tools' read-only ServiceAccount (see `tenancy/tools_identity.py`):
    the tools never act with the operator's own rights."""
    scopes_namespace: str | None = None
    """Where the per-scope tools accounts live (tenant isolation, see `tenancy/scope_identity.py`);
    unset: every run reads with the cluster-wide tools account, as before tenancy existed."""
    tools_read_role: str = "lestrade-tools-read"
    """The read-only ClusterRole the per-scope accounts are bound to, per namespace."""
    scope_identity_idle: float = 24 * 3600.0
    """Seconds without a run after which a per-scope account and its RoleBindings are deleted
    (`tenancy/scope_identity.py`; the next run of that scope makes them again)."""
    scope_policy: str | None = None
    """`namespace/name` of the ConfigMap with the cluster admin's scope grants (scopes.py)."""


@dataclass(frozen=True)
class SpendSettings:
    """Budgets across runs (budgets.py)."""

    namespace_limit: str = ""
    """Spend limit of every namespace without its own `lestrade.dev/spend-limit` annotation,
    e.g. `tokens=500000,cost=20,window=24h`; empty: none."""
    ledger_namespace: str = "default"
    """Where the per-namespace spend ledgers live: the operator's namespace, out of tenants' reach."""


@dataclass(frozen=True)
class TriggerSettings:
    """What starts runs without a person: schedules and Warning Events."""

    schedule_recheck: float = 10.0
    """Seconds between a ScheduledInvestigation's rounds when no time is due (to follow its
    runs and spec edits); as often as the CronJob controller looks."""
    event_batch_seconds: float = 1.0
    """Warning Events are collected this long and dispatched to the AlertRoutes together
    (event_source.py): one listing and one status update per route per burst."""
    alert_routes: RoutePolicy = field(default_factory=lambda: RoutePolicy("default", frozenset()))
    """Which namespaces' `Any` routes the API honours (LESTRADE_ALERT_ROUTES_*, beside the API's
    namespace): the operator explains a route's Ready condition by the policy the API matches by."""


@dataclass(frozen=True)
class ReplicaSettings:
    """Several operators: who runs what (membership.py, ownership.py)."""

    mode: str = "standby"
    """`shared`: replicas split the objects between them; `standby`: Kopf peering, the others
    wait (kept for Job mode and existing installs)."""
    name: str = ""
    """This replica's name (its Lease is `<group>-<name>`); empty: POD_NAME, else host-pid."""
    group: str = "lestrade"
    """Replicas with the same group share the work; two releases in one namespace differ."""
    lease_namespace: str = "default"
    """Where the replicas' Leases live: the operator's namespace."""
    lease_duration: float = 20.0
    """Seconds without renewal before the others call a replica dead and take its objects
    over: the bound on the takeover time (plus one renew interval to notice)."""
    lease_renew_deadline: float = 10.0
    """A replica that has not renewed for this long stops its runs; the gap to the duration
    is the margin for that stop to finish before anyone else starts them (seconds on a
    starved machine: measured up to ~5 s with a load of 12 on 2 cores)."""
    lease_renew_interval: float = 3.0
    """Seconds between renewals (and looks at the others' Leases): several tries fit in the
    deadline, so one slow request does not fence a healthy replica."""
    claim_handoff: float = 0.5
    """Seconds a replica waits before claiming an object another live replica is preferred
    for: bursts split without two claims racing for each object."""


@dataclass(frozen=True)
class DeliverySettings:
    """Results sent where people are (delivery/)."""

    console_url: str | None = None
    """Base URL of the web console, for the links in delivered messages."""
    timeout: float = 10.0
    """Seconds one delivery attempt may take; an attempt left `Sending` longer (its operator
    died) is tried again."""
    api_url: str | None = None
    """The API's URL for webhook receivers: where signed decision links point."""
    decision_key_file: str | None = None
    """The key that signs decision links (lestrade.decision_links), shared with the API."""


@dataclass(frozen=True)
class TelemetrySettings:
    """What the operator tells about itself."""

    metrics_port: int = 0
    """Port of the Prometheus metrics (`/metrics`); 0: not served."""


@dataclass(frozen=True)
class ProcessSettings:
    """The operator process among its peers: what it watches, how standby replicas take over."""

    watch_namespaces: tuple[str, ...] = ()
    """Only these namespaces (`--namespace`); empty: all, as one operator per cluster is the default."""
    peering_name: str = "lestrade"
    """Kopf's peering object of standby replicas: one release, one peering."""
    peering_lifetime: int = 20
    """Standby: seconds without the active peer's keep-alive before another takes over."""
    liveness: str | None = None
    """Kopf's health endpoint URL (the chart's liveness probe), e.g. http://0.0.0.0:8081/healthz."""
    install_admission_policy: bool = True
    """Apply the admission policies at start (needs the right to; the chart ships them instead)."""


_GROUPS: dict[str, type] = {
    "process": ProcessSettings,
    "runs": RunSettings,
    "status": StatusSettings,
    "jobs": JobSettings,
    "tools": ToolSettings,
    "tenancy": TenancySettings,
    "spend": SpendSettings,
    "triggers": TriggerSettings,
    "replicas": ReplicaSettings,
    "delivery": DeliverySettings,
    "telemetry": TelemetrySettings,
}


def _given(group: str, values: Mapping[str, Any] | None) -> dict[str, Any]:
    """The overrides of `group` that set something (None keeps the setting); unknown names refused."""
    if group not in _GROUPS:
        raise TypeError(f"no settings group {group!r}: the groups are {', '.join(_GROUPS)}")
    unknown = set(values or {}) - {f.name for f in fields(_GROUPS[group])}
    if unknown:
        raise TypeError(f"settings group {group!r} has no {', '.join(sorted(unknown))}")
    return {k: v for k, v in (values or {}).items() if v is not None}


def _check(runs: Mapping[str, Any], replicas: Mapping[str, Any], jobs: Mapping[str, Any]) -> None:
    """Refuses settings that contradict each other, naming the variable to change."""
    if runs["concurrency"] < 1:
        raise ValueError("LESTRADE_MAX_CONCURRENT_RUNS must be at least 1")
    if replicas["mode"] not in ("standby", "shared"):
        raise ValueError(f"LESTRADE_REPLICAS must be standby or shared, not {replicas['mode']!r}")
    if replicas["mode"] == "shared" and jobs["enabled"]:
        raise ValueError("LESTRADE_REPLICAS=shared does not work with Job mode (use standby)")
    if not (0 < replicas["lease_renew_interval"] < replicas["lease_renew_deadline"] < replicas["lease_duration"]):
        raise ValueError(
            "LESTRADE_LEASE_RENEW_INTERVAL < LESTRADE_LEASE_RENEW_DEADLINE < LESTRADE_LEASE_DURATION is required"
        )


@dataclass(frozen=True)
class OperatorSettings:
    """Every setting of the operator, grouped by what it governs (as kopf groups its own)."""

    process: ProcessSettings = field(default_factory=ProcessSettings)
    runs: RunSettings = field(default_factory=RunSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    jobs: JobSettings = field(default_factory=JobSettings)
    tools: ToolSettings = field(default_factory=ToolSettings)
    tenancy: TenancySettings = field(default_factory=TenancySettings)
    spend: SpendSettings = field(default_factory=SpendSettings)
    triggers: TriggerSettings = field(default_factory=TriggerSettings)
    replicas: ReplicaSettings = field(default_factory=ReplicaSettings)
    delivery: DeliverySettings = field(default_factory=DeliverySettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    pod_name: str | None = None
    """POD_NAME: the Events this operator posts name it as their reporting instance."""
    enabled_prompts: str | None = None
    """ENABLED_PROMPTS: which optional prompt parts the model gets (agent/prompts.py)."""
    models: ModelList | None = None
    """LESTRADE_MODEL_LIST (lestrade.config): the models runs may use; None: the demo model."""
    tracing: Mapping[str, str] = field(default_factory=dict)
    """The standard OTEL_* variables (base/telemetry.py): traces are on when they ask for it."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Mapping[str, Any] | None) -> OperatorSettings:
        """Reads the environment once. `overrides`: per group, the fields to set instead, e.g.
        `runs={"concurrency": 2}` (a test's operator, or the command line's flags)."""
        env = dict(os.environ if env is None else env)
        template: dict[str, Any] = {}
        if env.get("LESTRADE_JOB_POD_TEMPLATE"):
            template = yaml.safe_load(Path(env["LESTRADE_JOB_POD_TEMPLATE"]).read_text()) or {}
        own = _own_namespace(env)
        groups: dict[str, dict[str, Any]] = {
            "process": {
                "watch_namespaces": tuple(
                    n.strip() for n in env.get("LESTRADE_WATCH_NAMESPACES", "").split(",") if n.strip()
                ),
                "peering_name": env.get("LESTRADE_PEERING_NAME") or "lestrade",
                "peering_lifetime": int(env.get("LESTRADE_PEERING_LIFETIME", "20")),
                "liveness": env.get("LESTRADE_OPERATOR_LIVENESS") or None,
                "install_admission_policy": _flag(env.get("LESTRADE_INSTALL_ADMISSION_POLICY", "true")),
            },
            "runs": {
                "concurrency": int(env.get("LESTRADE_MAX_CONCURRENT_RUNS", "10")),
                "default_timeout": parse_duration(env.get("LESTRADE_DEFAULT_TIMEOUT", "30m")),
                "default_max_steps": int(env.get("LESTRADE_DEFAULT_MAX_STEPS", "20")),
                "cluster_name": env.get("LESTRADE_CLUSTER_NAME") or None,
                "select_idle_conversations": _flag(env.get("LESTRADE_SELECT_IDLE_CONVERSATIONS", "true")),
                "warm_model_client": _flag(env.get("LESTRADE_WARM_MODEL_CLIENT", "true")),
            },
            "status": {
                "interval": float(env.get("LESTRADE_STATUS_INTERVAL", "0.3")),
                "patches_per_second": float(env.get("LESTRADE_STATUS_PATCHES_PER_SECOND", "10")),
                "transcript_chunk_bytes": int(env.get("LESTRADE_TRANSCRIPT_CHUNK_BYTES", str(512 * 1024))),
            },
            "jobs": {
                "enabled": _flag(env.get("LESTRADE_JOB_MODE")),
                "namespace": env.get("LESTRADE_JOB_NAMESPACE") or own,
                "image": env.get("LESTRADE_JOB_IMAGE") or None,
                "service_account": env.get("LESTRADE_JOB_SERVICE_ACCOUNT") or None,
                "pod_template": template,
                "env": {key: env[key] for key in PASSED_TO_JOBS if env.get(key)},
            },
            "tools": {
                "prometheus_url": env.get("LESTRADE_PROMETHEUS_URL") or None,
                "prometheus_namespace_label": env.get("LESTRADE_PROMETHEUS_NAMESPACE_LABEL") or "namespace",
                "alertmanager_url": env.get("LESTRADE_ALERTMANAGER_URL") or None,
                "write_tools": _flag(env.get("LESTRADE_ENABLE_WRITE_TOOLS")),
                "bash": _flag(env.get("LESTRADE_ENABLE_BASH", "true")),
                "runbook_dirs": tuple(d for d in env.get("LESTRADE_RUNBOOK_DIRS", "").split(":") if d),
                "runbook_namespaces": tuple(
                    n.strip() for n in env.get("LESTRADE_RUNBOOK_NAMESPACES", "").split(",") if n.strip()
                )
                or (own,),
                "mcp_refresh": float(env.get("LESTRADE_MCP_REFRESH", "60")),
            },
            "tenancy": {
                "tools_service_account": _qualified(env.get("LESTRADE_TOOLS_SERVICE_ACCOUNT"), env),
                "scopes_namespace": env.get("LESTRADE_SCOPES_NAMESPACE") or None,
                "tools_read_role": env.get("LESTRADE_TOOLS_READ_ROLE") or "lestrade-tools-read",
                "scope_identity_idle": parse_duration(env.get("LESTRADE_SCOPE_IDENTITY_IDLE", "24h")),
                "scope_policy": _qualified(env.get("LESTRADE_SCOPE_POLICY"), env),
            },
            "spend": {
                "namespace_limit": env.get("LESTRADE_NAMESPACE_SPEND_LIMIT", ""),
                "ledger_namespace": own,
            },
            "triggers": {
                "schedule_recheck": float(env.get("LESTRADE_SCHEDULE_RECHECK", "10")),
                "event_batch_seconds": float(env.get("LESTRADE_EVENT_BATCH_SECONDS", "1")),
                "alert_routes": RoutePolicy.from_env(env.get("LESTRADE_NAMESPACE") or own, env),
            },
            "replicas": {
                "mode": (env.get("LESTRADE_REPLICAS") or "standby").strip().lower(),
                "name": env.get("LESTRADE_REPLICA_NAME")
                or env.get("POD_NAME")
                or f"{socket.gethostname()}-{os.getpid()}",
                "group": env.get("LESTRADE_REPLICA_GROUP") or "lestrade",
                "lease_namespace": own,
                "lease_duration": float(env.get("LESTRADE_LEASE_DURATION", "20")),
                "lease_renew_deadline": float(env.get("LESTRADE_LEASE_RENEW_DEADLINE", "10")),
                "lease_renew_interval": float(env.get("LESTRADE_LEASE_RENEW_INTERVAL", "3")),
                "claim_handoff": float(env.get("LESTRADE_CLAIM_HANDOFF", "0.5")),
            },
            "delivery": {
                "console_url": env.get("LESTRADE_CONSOLE_URL") or None,
                "timeout": float(env.get("LESTRADE_DELIVERY_TIMEOUT", "10")),
                "api_url": env.get("LESTRADE_API_URL") or None,
                "decision_key_file": env.get("LESTRADE_DECISION_KEY_FILE") or None,
            },
            "telemetry": {"metrics_port": int(env.get("LESTRADE_METRICS_PORT") or "0")},
        }
        for group, values in overrides.items():
            given = _given(group, values)  # first: refuses an unknown group or field
            groups[group].update(given)
        _check(groups["runs"], groups["replicas"], groups["jobs"])
        return cls(
            **{name: _GROUPS[name](**values) for name, values in groups.items()},
            pod_name=env.get("POD_NAME") or None,
            enabled_prompts=env.get("ENABLED_PROMPTS"),
            models=load_model_list(env=env),
            tracing={k: v for k, v in env.items() if k.startswith("OTEL_")},
        )

    def with_overrides(self, **overrides: Mapping[str, Any] | None) -> OperatorSettings:
        """These settings with `overrides` (per group, as `from_env` takes them; a None value
        keeps the setting), checked as `from_env` checks them: the command line's flags on
        the environment read once, without reading the Job pod template and model list again."""
        changed = {}
        for group, values in overrides.items():
            given = _given(group, values)  # first: refuses an unknown group or field
            changed[group] = replace(getattr(self, group), **given)
        _check(*(vars(changed.get(name, getattr(self, name))) for name in ("runs", "replicas", "jobs")))
        return replace(self, **changed)
