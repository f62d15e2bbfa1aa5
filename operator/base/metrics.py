"""The operator's Prometheus metrics: runs, model calls, tokens and cost, tool calls and
approvals (the request layer's are in `lestrade.metrics`). Served by the operator on
`LESTRADE_METRICS_PORT` (`serve`); the README lists them with example PromQL.

Label values are bounded: kinds, phases, failure reasons and tool outcomes are the operator's
own words; models are names from the model list; tools are names in the tool registry (a name
the model made up counts as "unknown", so a hostile model cannot grow the label set);
namespaces are those that have runs. Each attempt resolves its label children once
(`RunMeter`), so an event costs an increment, not a `labels()` lookup.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

__all__ = [
    "RunMeter",
    "ApprovalWaits",
    "run_ended",
    "run_failed",
    "serve",
    "APPROVALS",
    "mcp_tool_call",
    "MCP_SERVER_UP",
    "MCP_DISCOVERIES",
    "MCP_TOOLS",
]

_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)

RUNS = Counter(
    "lestrade_runs",
    "Runs (an Investigation, or one Conversation turn) that reached a phase: Succeeded, "
    "Answered (a turn), Failed, or AwaitingApproval (counted at each pause).",
    ["kind", "phase"],
)
RUN_FAILURES = Counter("lestrade_run_failures", "Runs that failed, by reason.", ["kind", "reason"])
RUNS_ACTIVE = Gauge("lestrade_runs_active", "Attempts running in this operator now.", ["kind"])
RUN_DURATION = Histogram(
    "lestrade_run_duration_seconds",
    "From the start of a run (or turn) to its end, waits for approval included.",
    ["kind", "phase"],
    buckets=_DURATION_BUCKETS,
)
RUN_STEPS = Histogram(
    "lestrade_run_steps",
    "Model calls (steps) of a finished run or turn.",
    ["kind"],
    buckets=(1, 2, 3, 5, 8, 13, 20, 30, 50, 100),
)
RUN_BUDGET = Histogram(
    "lestrade_run_step_budget_used_ratio",
    "Steps a finished run used over its maxSteps.",
    ["kind"],
    buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 1.0),
)
MODEL_CALLS = Counter("lestrade_model_calls", "Model calls that answered, by model.", ["model"])
MODEL_LATENCY = Histogram(
    "lestrade_model_call_duration_seconds",
    "Duration of a model call that answered.",
    ["model"],
    buckets=_LATENCY_BUCKETS,
)
MODEL_RETRIES = Counter(
    "lestrade_model_retries",
    "Model calls that failed and were retried, by reason.",
    ["model", "reason"],
)
TOKENS = Counter(
    "lestrade_model_tokens",
    "Tokens the provider reported, by model, namespace and type "
    "(prompt or completion; cached: the part of prompt read from the provider's prompt cache).",
    ["model", "namespace", "type"],
)
COST = Counter(
    "lestrade_model_cost_dollars",
    "Cost in US dollars litellm reported, by model and namespace.",
    ["model", "namespace"],
)
TOOL_CALLS = Counter(
    "lestrade_tool_calls",
    "Tool calls that ended, by tool and outcome (success, error, no_data, denied).",
    ["tool", "outcome"],
)
TOOL_DURATION = Histogram(
    "lestrade_tool_call_duration_seconds",
    "Duration of a tool call that ran.",
    ["tool"],
    buckets=_LATENCY_BUCKETS,
)
APPROVALS_PENDING = Gauge(
    "lestrade_approvals_pending",
    "Tool calls waiting for a decision, as this operator sees them.",
    ["kind"],
)
APPROVAL_WAIT = Histogram(
    "lestrade_approval_wait_seconds",
    "From a run's pause for approval to its decisions.",
    ["kind"],
    buckets=(5, 15, 30, 60, 300, 900, 1800, 3600, 14400, 86400),
)


# MCP servers: `server` is an MCPServer's namespace/name, `tool` one of the tools it listed
# (at most 128 per server, names validated), so the label sets are bounded by the resources.
MCP_CALLS = Counter(
    "lestrade_mcp_tool_calls",
    "Calls of MCP servers' tools, by outcome (success, error, no_data).",
    ["server", "tool", "outcome"],
)
MCP_DURATION = Histogram(
    "lestrade_mcp_tool_call_duration_seconds",
    "Duration of MCP tool calls (connect included).",
    ["server", "tool"],
    buckets=_LATENCY_BUCKETS,
)
MCP_SERVER_UP = Gauge(
    "lestrade_mcp_server_up", "1 when the MCP server's tools were listed at the last try.", ["server"]
)
MCP_TOOLS = Gauge("lestrade_mcp_server_tools", "Tools the MCP server offers to runs.", ["server"])
MCP_DISCOVERIES = Counter(
    "lestrade_mcp_discoveries",
    "Connections to MCP servers to list their tools, by outcome (ok, error).",
    ["server", "outcome"],
)


def mcp_tool_call(server: str, tool: str, outcome: str, seconds: float) -> None:
    MCP_CALLS.labels(server, tool, outcome).inc()
    MCP_DURATION.labels(server, tool).observe(seconds)


class RunMeter:
    """The metric children of one attempt (kind, namespace and model are fixed for it)."""

    def __init__(self, kind: str, namespace: str, model: str, known_tool: Callable[[str], Any]) -> None:
        self.kind = kind
        self.model = model
        self._known_tool = known_tool
        self._calls = MODEL_CALLS.labels(model)
        self._latency = MODEL_LATENCY.labels(model)
        self._prompt = TOKENS.labels(model, namespace, "prompt")
        self._completion = TOKENS.labels(model, namespace, "completion")
        self._cached = TOKENS.labels(model, namespace, "cached")
        self._cost = COST.labels(model, namespace)
        self._tools_started: dict[str, tuple[str, float]] = {}

    def model_call(self, latency: float) -> None:
        self._calls.inc()
        self._latency.observe(latency)

    def model_retry(self, reason: str) -> None:
        MODEL_RETRIES.labels(self.model, reason).inc()

    def tokens(self, prompt: int, completion: int, cost: float, *, cached: int = 0) -> None:
        self._prompt.inc(max(0, prompt))
        self._completion.inc(max(0, completion))
        if cached > 0:
            self._cached.inc(cached)
        if cost > 0:
            self._cost.inc(cost)

    def _tool(self, name: str) -> str:
        return name if self._known_tool(name) else "unknown"

    def tool_started(self, call_id: str, name: str) -> None:
        self._tools_started[call_id] = (name, time.monotonic())

    def tool_ended(self, call_id: str, name: str, outcome: str) -> None:
        tool = self._tool(name)
        TOOL_CALLS.labels(tool, outcome).inc()
        started = self._tools_started.pop(call_id, None)
        if started is not None:
            TOOL_DURATION.labels(tool).observe(time.monotonic() - started[1])


def run_ended(
    kind: str, phase: str, started: float | None, steps: int | None = None, max_steps: int | None = None
) -> None:
    """A run (or turn) reached `phase`; `started` is its start as a unix time."""
    RUNS.labels(kind, phase).inc()
    if phase == "AwaitingApproval":
        return
    if started is not None:
        RUN_DURATION.labels(kind, phase).observe(max(0.0, time.time() - started))
    if steps is not None:
        RUN_STEPS.labels(kind).observe(steps)
        if max_steps:
            RUN_BUDGET.labels(kind).observe(steps / max_steps)


def run_failed(kind: str, reason: str, started: float | None) -> None:
    RUN_FAILURES.labels(kind, reason).inc()
    run_ended(kind, "Failed", started)


class ApprovalWaits:
    """Runs waiting for decisions (uid -> kind, calls waiting, since): the pending gauge and,
    when the decisions are in, the wait. A process counts the waits it sees: after a restart,
    a wait is measured from the new process's start."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[str, int, float]] = {}

    def waiting(self, uid: str, kind: str, calls: int) -> None:
        before = self._waiting.get(uid)
        since = before[2] if before else time.monotonic()
        APPROVALS_PENDING.labels(kind).inc(calls - (before[1] if before else 0))
        self._waiting[uid] = (kind, calls, since)

    def decided(self, uid: str) -> None:
        entry = self._waiting.pop(uid, None)
        if entry is not None:
            kind, calls, since = entry
            APPROVALS_PENDING.labels(kind).dec(calls)
            APPROVAL_WAIT.labels(kind).observe(time.monotonic() - since)

    def forget(self, uid: str) -> None:
        """The run stopped waiting without decisions (deleted, timed out, operator stopping)."""
        entry = self._waiting.pop(uid, None)
        if entry is not None:
            APPROVALS_PENDING.labels(entry[0]).dec(entry[1])


APPROVALS = ApprovalWaits()


def serve(port: int, addr: str = "0.0.0.0") -> Callable[[], None]:
    """Serves /metrics of this process on `port` (a thread of prometheus-client); returns the
    function that stops it."""
    server, thread = start_http_server(port, addr)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
