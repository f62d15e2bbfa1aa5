"""PromQL tools over the Prometheus HTTP API (works with Prometheus, Thanos, Mimir, VictoriaMetrics).

A run scoped to namespaces gets the same tools with its namespaces enforced on every series
selector of every query (`promql_scope`, as prom-label-proxy does); the server's own parser
re-checks the rewritten query where it offers `/api/v1/parse_query` (Prometheus does).

Results are printed compactly — one line per series, `{labels} value` — because JSON matrices
cost thousands of tokens for what a person would read as "memory grew from 50Mi to 64Mi then the
pod restarted". Range results are downsampled to a bounded number of points per series.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from datetime import UTC, datetime
from typing import Any

from lestrade.operator.tools.base import Tool, Toolset
from lestrade.operator.tools.common import FunctionTool, Params, ToolInputError, schema
from lestrade.operator.tools.promql_scope import (
    NamespaceScope,
    ScopeRefused,
    enforce_query,
    enforce_selector,
    verify_server_ast,
)

__all__ = ["prometheus_toolset", "format_vector", "format_matrix", "parse_time_arg"]

MAX_SERIES = 50
MAX_POINTS = 30

_INSTRUCTIONS = """\
Prometheus: find metric and label names (prometheus_labels, prometheus_series) before querying;
range queries return a few points per series, so prefer aggregations (sum by, rate,
max_over_time). Times: now, -1h, RFC 3339 or unix seconds."""

_SCOPED = """Your PromQL is confined to series whose `{label}` label is one of: {namespaces}. Every
selector of every query gets that matcher added, so series of other namespaces and
cluster-level series without the label (nodes, the control plane) are not visible to you;
an empty result may mean the series belong elsewhere."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time_arg(value: str | None, default: float, now: float | None = None) -> float:
    """`now`, `-1h` / `1h` (ago), RFC3339, or a unix timestamp → unix seconds."""
    now = time.time() if now is None else now
    if value is None or value == "":
        return default
    text = str(value).strip()
    if text == "now":
        return now
    relative = _DURATION.match(text.lstrip("-"))
    if relative:
        return now - float(relative.group(1)) * _UNITS[relative.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ToolInputError(f"cannot read time '{value}'; use now, -1h, RFC3339 or a unix timestamp") from None


def _duration_seconds(value: str | None) -> float | None:
    if not value:
        return None
    text = str(value).strip()
    match = _DURATION.match(text)
    if match:
        return float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return float(text)
    except ValueError:
        raise ToolInputError(f"cannot read step '{value}'; use e.g. 30s, 5m") from None


def _labels(metric: dict[str, str]) -> str:
    name = metric.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{rest}}}" if rest or not name else name


def _num(value: str) -> str:
    try:
        number = float(value)
    except ValueError:
        return value
    if math.isnan(number) or math.isinf(number):
        return value
    if number == int(number) and abs(number) < 1e15:
        return str(int(number))
    return f"{number:.6g}"


def _ts(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_vector(result: list[dict[str, Any]]) -> str:
    if not result:
        return "empty result (no series matched)"
    lines = [f"{_labels(r.get('metric') or {})} {_num(r['value'][1])}" for r in result[:MAX_SERIES]]
    if len(result) > MAX_SERIES:
        lines.append(f"[... {len(result) - MAX_SERIES} more series; aggregate or filter the query]")
    return f"{len(result)} series at {_ts(float(result[0]['value'][0]))}:\n" + "\n".join(lines)


def format_matrix(result: list[dict[str, Any]]) -> str:
    if not result:
        return "empty result (no series matched)"
    blocks = []
    for series in result[:MAX_SERIES]:
        values = series.get("values") or []
        if not values:
            continue
        picked = (
            values
            if len(values) <= MAX_POINTS
            else [values[round(i * (len(values) - 1) / (MAX_POINTS - 1))] for i in range(MAX_POINTS)]
        )
        numbers = [float(v[1]) for v in values if v[1] not in ("NaN", "+Inf", "-Inf")]
        stats = f"min={_num(str(min(numbers)))} max={_num(str(max(numbers)))} " if numbers else ""
        points = " ".join(f"{_ts(float(t))[11:19]}={_num(v)}" for t, v in picked)
        blocks.append(
            f"{_labels(series.get('metric') or {})}\n  {len(values)} points {_ts(float(values[0][0]))} .. "
            f"{_ts(float(values[-1][0]))} {stats}last={_num(values[-1][1])}\n  {points}"
        )
    if len(result) > MAX_SERIES:
        blocks.append(f"[... {len(result) - MAX_SERIES} more series; aggregate or filter the query]")
    return "\n".join(blocks)


class _Prometheus:
    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
        verify: bool | str = True,
        scope: NamespaceScope | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = headers or {}
        self.timeout = timeout
        self.verify = verify
        self.scope = scope
        self._server_parses: bool | None = None  # whether /api/v1/parse_query exists there

    async def confine(self, query: str, *, selector: bool = False) -> str:
        """The query as a scoped run may send it (unchanged for whole-cluster runs)."""
        if self.scope is None:
            return query
        try:
            # off the event loop: parsing is CPU work, and other runs share the loop
            rewritten = await asyncio.to_thread(enforce_selector if selector else enforce_query, query, self.scope)
            if self._server_parses is not False:
                await self._server_check(rewritten)
        except ScopeRefused as exc:
            raise ToolInputError(f"query refused: {exc}") from None
        return rewritten

    async def _server_check(self, rewritten: str) -> None:
        """Have the server parse what will be sent: a difference between its parser and ours
        must not open a hole. Servers without the endpoint (Thanos, Mimir, ...) skip this."""
        try:
            ast, _ = await self.api("parse_query", [("query", rewritten)])
        except _NotFound:
            self._server_parses = False
            return
        except RuntimeError as exc:
            raise ScopeRefused(f"the server did not accept the confined query: {exc}") from None
        self._server_parses = True
        verify_server_ast(ast, self.scope)  # type: ignore[arg-type]

    async def api(self, path: str, params: list[tuple[str, str]]) -> tuple[Any, list[str]]:
        import httpx  # at the first query: ~0.6 s of the operator's start otherwise (it imports rich)

        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers, verify=self.verify) as client:
            try:
                form: dict[str, list[str]] = {}
                for key, value in params:
                    form.setdefault(key, []).append(value)
                if path.startswith("label/"):  # label values is GET-only; the rest take POST (long queries)
                    response = await client.get(f"{self.url}/api/v1/{path}", params=form)
                else:
                    response = await client.post(f"{self.url}/api/v1/{path}", data=form)
            except httpx.HTTPError as exc:
                raise RuntimeError(f"cannot reach Prometheus at {self.url}: {type(exc).__name__}: {exc}") from None
        if response.status_code in (404, 405, 501):  # e.g. parse_query on servers without it
            raise _NotFound(f"{path} is not served by {self.url} (HTTP {response.status_code})")
        try:
            body = response.json()
        except ValueError:
            raise RuntimeError(f"Prometheus returned HTTP {response.status_code}: {response.text[:300]}") from None
        if body.get("status") != "success":
            raise RuntimeError(f"{body.get('errorType', 'error')}: {body.get('error', response.text[:300])}")
        warnings = body.get("warnings") or []
        data = body.get("data")
        return data, warnings

    async def instant(self, p: Params) -> str:
        query = await self.confine(p.required("query"))
        params = [("query", query)]
        if p.opt_str("time"):
            params.append(("time", str(parse_time_arg(p.opt_str("time"), time.time()))))
        data, warnings = await self.api("query", params)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "vector":
            text = format_vector(result)
        elif kind == "matrix":
            text = format_matrix(result)
        else:  # scalar or string: [time, value]
            text = f"{kind}: {_num(str(result[1]))}"
        return _with_warnings(text, warnings)

    async def range(self, p: Params) -> str:
        query = await self.confine(p.required("query"))
        now = time.time()
        end = parse_time_arg(p.opt_str("end"), now, now)
        start = parse_time_arg(p.opt_str("start"), end - 3600, now)
        if start >= end:
            raise ToolInputError("start must be before end")
        step = _duration_seconds(p.opt_str("step")) or max(1.0, math.ceil((end - start) / 120))
        data, warnings = await self.api(
            "query_range", [("query", query), ("start", str(start)), ("end", str(end)), ("step", str(step))]
        )
        return _with_warnings(format_matrix(data.get("result") or []), warnings)

    async def series(self, p: Params) -> str:
        match = await self.confine(p.required("match"), selector=True)
        now = time.time()
        start = parse_time_arg(p.opt_str("start"), now - 3600, now)
        data, warnings = await self.api(
            "series", [("match[]", match), ("start", str(start)), ("end", str(now)), ("limit", "201")]
        )
        if not data:
            return "no series matched"
        lines = [_labels(s) for s in data[:200]]
        if len(data) > 200:
            lines.append("[... more series; narrow the matcher]")
        return _with_warnings(f"{len(data) if len(data) <= 200 else '200+'} series:\n" + "\n".join(lines), warnings)

    async def labels(self, p: Params) -> str:
        label = p.opt_str("label")
        match = p.opt_str("match")
        if self.scope is not None:  # label names and values only of the scope's series
            label_name, op, value = self.scope.matcher()
            match = await self.confine(match or f'{{{label_name}{op}"{value}"}}', selector=True)
        params: list[tuple[str, str]] = [("start", str(time.time() - 3600))]
        if match:
            params.append(("match[]", match))
        if label:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label):
                raise ToolInputError(f"'{label}' is not a label name")
            data, warnings = await self.api(f"label/{label}/values", params)
            what = f"values of label {label}"
        else:
            data, warnings = await self.api("labels", params)
            what = "label names"
        if not data:
            return f"no {what} found"
        shown = data[:300]
        more = f"\n[... {len(data) - 300} more]" if len(data) > 300 else ""
        return _with_warnings(f"{len(data)} {what}:\n" + "\n".join(shown) + more, warnings)


class _NotFound(RuntimeError):
    """The server has no such endpoint (HTTP 404)."""


def _with_warnings(text: str, warnings: list[str]) -> str:
    return text + ("\nwarnings: " + "; ".join(warnings) if warnings else "")


def prometheus_toolset(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    verify: bool | str = True,
    scope: NamespaceScope | None = None,
) -> Toolset:
    """PromQL tools against the Prometheus-compatible API at `url` (e.g. http://prometheus:9090);
    with `scope`, every query reads only series of the scope's namespaces."""
    prom = _Prometheus(url, headers=headers, timeout=timeout, verify=verify, scope=scope)
    when = {"type": "string"}
    tools: list[Tool] = [
        FunctionTool(
            "prometheus_instant_query",
            "PromQL at one time (default now).",
            schema(["query"], query={"type": "string"}, time=when),
            prom.instant,
            lambda p: f"promql: {p.opt_str('query')}",
        ),
        FunctionTool(
            "prometheus_range_query",
            "PromQL over a range (default the last 1h).",
            schema(
                ["query"],
                query={"type": "string"},
                start=when,
                end=when,
                step={"type": "string"},
            ),
            prom.range,
            lambda p: (
                f"promql range: {p.opt_str('query')} [{p.opt_str('start') or '-1h'}..{p.opt_str('end') or 'now'}]"
            ),
        ),
        FunctionTool(
            "prometheus_series",
            "Series matching a selector.",
            schema(["match"], match={"type": "string"}, start=when),
            prom.series,
            lambda p: f"prometheus series {p.opt_str('match')}",
        ),
        FunctionTool(
            "prometheus_labels",
            "Label names, or one label's values (label=__name__: the metrics).",
            schema(None, label={"type": "string"}, match={"type": "string"}),
            prom.labels,
            lambda p: f"prometheus labels {p.opt_str('label') or ''}".rstrip(),
        ),
    ]
    instructions = _INSTRUCTIONS
    if scope is not None:
        instructions += "\n" + _SCOPED.format(label=scope.label, namespaces=", ".join(scope.namespaces))
    return Toolset(
        name="prometheus",
        tools=tools,
        instructions=instructions,
        summary="PromQL, series, labels",
        read_only=True,
    )
