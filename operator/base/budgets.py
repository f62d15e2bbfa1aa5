"""Spending limits: per run (an Investigation, or one Conversation turn) and per namespace.

- A run's own limits are `spec.maxTokens` and `spec.maxCost`. They are checked after every
  model call: once passed, the run ends with reason `BudgetExceeded` before the next model
  call, keeping its transcript, tool calls and usage (a step that was the final answer still
  counts as an answer: its tokens are already spent).
- A namespace's limit is a spend over a sliding window, e.g. `tokens=500000,cost=20,window=24h`:
  the Namespace's annotation `lestrade.dev/spend-limit` (set by whoever administers namespaces,
  not by the tenant), else the operator's `LESTRADE_NAMESPACE_SPEND_LIMIT` for every namespace.
  It is checked before a run (or turn) starts and after each of its model calls; runs refused
  or stopped by it end with reason `NamespaceBudgetExhausted`. Triggers need no check of their
  own: whatever they create runs through here, so an alert storm cannot spend past it.

What was spent is kept in a ledger per namespace: a ConfigMap `lestrade-spend-<namespace>` in
the operator's namespace (tenants cannot reset it), with one entry per time bucket; updates
carry the resourceVersion read (a conflict means someone else added: read again and add).
The spend and the limit are exported as metrics.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge

from lestrade.kube import ApiException, Kube, api_path
from lestrade.resources.common import parse_duration
from lestrade.resources.keys import LEDGER_NAMESPACE_ANNOTATION, SPEND_LEDGER_LABEL, SPEND_LIMIT_ANNOTATION

__all__ = [
    "SpendLimit",
    "Spend",
    "Ledger",
    "SPEND_LIMIT_ANNOTATION",
    "run_budget_passed",
    "NAMESPACE_SPEND_TOKENS",
    "NAMESPACE_SPEND_COST",
    "BUDGET_STOPS",
]

_BUCKETS = 60  # a window is kept in this many buckets: the window slides in 1/60 steps

NAMESPACE_SPEND_TOKENS = Gauge(
    "lestrade_namespace_spend_tokens",
    "Tokens spent in the namespace's spend-limit window",
    ["namespace"],
)
NAMESPACE_SPEND_COST = Gauge(
    "lestrade_namespace_spend_cost_dollars",
    "Cost (USD) spent in the namespace's spend-limit window",
    ["namespace"],
)
NAMESPACE_LIMIT_TOKENS = Gauge(
    "lestrade_namespace_spend_limit_tokens",
    "The namespace's token limit per window (0: none)",
    ["namespace"],
)
NAMESPACE_LIMIT_COST = Gauge(
    "lestrade_namespace_spend_limit_cost_dollars",
    "The namespace's cost limit per window (0: none)",
    ["namespace"],
)
BUDGET_STOPS = Counter(
    "lestrade_budget_stops_total",
    "Runs refused or stopped by a budget",
    ["kind", "reason"],
)


class SpendLimitError(ValueError):
    """A spend-limit text that cannot be parsed."""


@dataclass(frozen=True)
class SpendLimit:
    tokens: int | None
    cost: float | None
    window: float
    """Seconds."""

    @classmethod
    def parse(cls, text: str) -> SpendLimit:
        """`tokens=500000,cost=20,window=24h` (each part optional but one of tokens/cost)."""
        values: dict[str, str] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in ("tokens", "cost", "window"):
                raise SpendLimitError(f"{part!r}: expected tokens=N, cost=USD or window=DURATION")
            values[key.strip()] = value.strip()
        try:
            tokens = int(values["tokens"]) if "tokens" in values else None
            cost = float(values["cost"]) if "cost" in values else None
            window = parse_duration(values.get("window", "24h"))
        except ValueError as exc:
            raise SpendLimitError(str(exc)) from None
        if tokens is None and cost is None:
            raise SpendLimitError("a spend limit needs tokens=N or cost=USD")
        if window <= 0 or (tokens is not None and tokens < 0) or (cost is not None and cost < 0):
            raise SpendLimitError("limits and window must be positive")
        return cls(tokens, cost, window)

    def passed(self, spend: Spend) -> str | None:
        """Why `spend` is at or over this limit; None while under it."""
        window = _duration_text(self.window)
        if self.tokens is not None and spend.tokens >= self.tokens:
            return f"the namespace spent {spend.tokens} tokens in the last {window}; its limit is {self.tokens}"
        if self.cost is not None and spend.cost >= self.cost:
            return f"the namespace spent ${spend.cost:.4f} in the last {window}; its limit is ${self.cost:g}"
        return None


@dataclass(frozen=True)
class Spend:
    tokens: int = 0
    cost: float = 0.0


def run_budget_passed(spec: Any, tokens: int, cost: float) -> str | None:
    """Why a run with this usage is over its own spec.maxTokens / spec.maxCost; else None."""
    max_tokens = getattr(spec, "max_tokens", None)
    max_cost = getattr(spec, "max_cost", None)
    if max_tokens is not None and tokens >= max_tokens:
        return f"the run spent {tokens} tokens; its spec.maxTokens is {max_tokens}"
    if max_cost is not None and cost >= max_cost:
        return f"the run spent ${cost:.4f}; its spec.maxCost is ${max_cost:g}"
    return None


def _duration_text(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


_SAFE = re.compile(r"[^a-z0-9-]")


class Ledger:
    """Spend per namespace; see the module docstring."""

    def __init__(self, kube: Kube, namespace: str, default_limit: str = "", cache_seconds: float = 5.0) -> None:
        self.kube = kube
        self.namespace = namespace
        """Where the ledgers live (the operator's namespace)."""
        self.default = SpendLimit.parse(default_limit) if default_limit else None
        self.cache_seconds = cache_seconds
        """How long a namespace's limit (its annotation) is cached: a changed limit applies
        within seconds, without a read per model call."""
        self._limits: dict[str, tuple[float, SpendLimit | None, str | None]] = {}
        self._reading: dict[str, asyncio.Task[tuple[SpendLimit | None, str | None]]] = {}
        """The read of a namespace's limit under way: the runs that need it meanwhile share it (a
        burst of 200 runs read the Namespace once per cache period, not once each)."""
        self._locks: dict[str, asyncio.Lock] = {}

    def _path(self, namespace: str = "") -> str:
        name = f"lestrade-spend-{_SAFE.sub('-', namespace)}"[:253] if namespace else ""
        return api_path("v1", "configmaps", self.namespace, name)

    async def limit(self, namespace: str) -> tuple[SpendLimit | None, str | None]:
        """The namespace's limit, and the problem with its annotation if it cannot be parsed
        (then the operator's default applies)."""
        cached = self._limits.get(namespace)
        if cached and cached[0] > time.monotonic():
            return cached[1], cached[2]
        task = self._reading.get(namespace)
        if task is None:
            task = self._reading[namespace] = asyncio.ensure_future(self._read_limit(namespace))

            def done(finished: asyncio.Task[Any], namespace: str = namespace) -> None:
                if self._reading.get(namespace) is finished:
                    del self._reading[namespace]
                if not finished.cancelled():
                    finished.exception()  # retrieved here too: every waiter may have gone

            task.add_done_callback(done)
        # Shielded: a run that is cancelled while waiting does not cancel the others' read.
        return await asyncio.shield(task)

    async def _read_limit(self, namespace: str) -> tuple[SpendLimit | None, str | None]:
        limit, problem = self.default, None
        try:
            ns = await self.kube.get(api_path("v1", "namespaces", None, namespace))
            text = ((ns.get("metadata") or {}).get("annotations") or {}).get(SPEND_LIMIT_ANNOTATION)
            if text:
                limit = SpendLimit.parse(text)
        except SpendLimitError as exc:
            problem = f"annotation {SPEND_LIMIT_ANNOTATION} of namespace {namespace}: {exc}"
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
        NAMESPACE_LIMIT_TOKENS.labels(namespace).set((limit.tokens or 0) if limit else 0)
        NAMESPACE_LIMIT_COST.labels(namespace).set((limit.cost or 0) if limit else 0)
        self._limits[namespace] = (time.monotonic() + self.cache_seconds, limit, problem)
        return limit, problem

    async def check(self, namespace: str) -> str | None:
        """Why the namespace may not spend more now; None when it may (or has no limit)."""
        limit, _ = await self.limit(namespace)
        if limit is None:
            return None
        return limit.passed(await self.spent(namespace, limit.window))

    async def spent(self, namespace: str, window: float) -> Spend:
        try:
            data = (await self.kube.get(self._path(namespace))).get("data") or {}
        except ApiException as exc:
            if exc.status == 404:
                return Spend()
            raise
        spend = _sum(data, window, time.time())
        NAMESPACE_SPEND_TOKENS.labels(namespace).set(spend.tokens)
        NAMESPACE_SPEND_COST.labels(namespace).set(spend.cost)
        return spend

    async def add(self, namespace: str, tokens: int, cost: float) -> None:
        """Adds one model call's spend (only namespaces with a limit keep a ledger)."""
        limit, _ = await self.limit(namespace)
        if limit is None or (tokens <= 0 and cost <= 0):
            return
        bucket_seconds = max(1.0, limit.window / _BUCKETS)
        lock = self._locks.setdefault(namespace, asyncio.Lock())
        async with lock:
            for _ in range(50):
                now = time.time()
                key = f"b{int(now // bucket_seconds) * int(bucket_seconds)}"
                try:
                    current = await self.kube.get(self._path(namespace))
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    body = {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": self._path(namespace).rsplit("/", 1)[-1],
                            "labels": {"app.kubernetes.io/part-of": "lestrade", SPEND_LEDGER_LABEL: "true"},
                            "annotations": {LEDGER_NAMESPACE_ANNOTATION: namespace},
                        },
                        "data": {key: f"{tokens} {cost!r}"},
                    }
                    try:
                        await self.kube.create(self._path(), body, parse=False)
                        break
                    except ApiException as exc2:
                        if exc2.status == 409:
                            continue
                        raise
                data = dict(current.get("data") or {})
                old_tokens, old_cost = _parse_entry(data.get(key, "0 0"))
                # A merge patch carrying the resourceVersion read (the chart grants `patch`,
                # not `update`, on ConfigMaps); old buckets go, so it never holds more than a window.
                changes: dict[str, str | None] = {
                    k: None for k in data if _bucket_time(k) <= now - limit.window - bucket_seconds
                }
                changes[key] = f"{old_tokens + tokens} {old_cost + cost!r}"
                patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "data": changes}
                try:
                    await self.kube.patch(self._path(namespace), patch, parse=False)
                    break
                except ApiException as exc:
                    if exc.status != 409:
                        raise
        await self.spent(namespace, limit.window)  # refresh the metrics


def _bucket_time(key: str) -> float:
    try:
        return float(key[1:])
    except ValueError:
        return 0.0


def _parse_entry(value: str) -> tuple[int, float]:
    try:
        tokens, cost = value.split()
        return int(tokens), float(cost)
    except ValueError:
        return 0, 0.0


def _sum(data: dict[str, str], window: float, now: float) -> Spend:
    tokens, cost = 0, 0.0
    for key, value in data.items():
        if _bucket_time(key) > now - window:
            t, c = _parse_entry(value)
            tokens, cost = tokens + t, cost + c
    return Spend(tokens, cost)
