"""The alerting view: what is firing, which rules fire it, and what people silenced.

Prometheus' `/api/v1/alerts` and `/api/v1/rules`, Alertmanager's `/api/v2/alerts` and
`/api/v2/silences`, printed one line per alert or rule. A run scoped to namespaces sees only
what belongs to them, decided on the labels (as prom-label-proxy does for these endpoints):
an alert whose `namespace` label is in the scope; a rule with such an alert or such a static
label; a silence with an equality matcher on one of the scope's namespaces. Alerts, annotations
and silence comments are written by anyone who can write a rule or a silence (and templated
from labels), so they are cut short and go through the tools' redaction like every output.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lestrade.operator.tools.base import Tool, Toolset
from lestrade.operator.tools.common import FunctionTool, Params, ToolInputError, schema
from lestrade.operator.tools.promql_scope import NamespaceScope

__all__ = ["alerting_toolset"]

MAX_ITEMS = 100
_TEXT = 240  # characters of one annotation or comment


def _instructions(names: list[str]) -> str:
    """What the offered alerting tools are for, naming only those offered."""
    firing = " and ".join(n for n in ("prometheus_alerts", "alertmanager_alerts") if n in names)
    text = f"Alerts: start from what fires ({firing})"
    if "prometheus_rules" in names:
        text += "; read a rule's expression (prometheus_rules) before querying"
    if "alertmanager_silences" in names:
        text += "; alertmanager_silences shows who silenced what"
    return text + "."


class _HttpJson:
    def __init__(
        self, url: str, *, headers: dict[str, str] | None, timeout: float, verify: bool | str, what: str
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = headers or {}
        self.timeout = timeout
        self.verify = verify
        self.what = what

    async def get(self, path: str, params: list[tuple[str, str]] | None = None) -> Any:
        import httpx  # lazily, as in prometheus.py: keeps the operator's start fast

        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers, verify=self.verify) as client:
            try:
                response = await client.get(f"{self.url}{path}", params=params or [])  # type: ignore[arg-type]
            except httpx.HTTPError as exc:
                raise RuntimeError(f"cannot reach {self.what} at {self.url}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            raise RuntimeError(f"{self.what} returned HTTP {response.status_code}: {response.text[:300]}")
        try:
            return response.json()
        except ValueError:
            raise RuntimeError(f"{self.what} returned no JSON: {response.text[:300]}") from None


def _short(text: Any, limit: int = _TEXT) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def _labels(labels: dict[str, Any] | None, skip: tuple[str, ...] = ("alertname",)) -> str:
    return "{" + ", ".join(f'{k}="{_short(v, 120)}"' for k, v in sorted((labels or {}).items()) if k not in skip) + "}"


def _since(stamp: str | None) -> str:
    """`2026-11-26T13:40:01.123Z` → `13:40:01Z (12m ago)`."""
    if not stamp:
        return "?"
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return _short(stamp, 40)
    ago = int((datetime.now(UTC) - when).total_seconds())
    span = (
        f"{ago // 86400}d"
        if ago >= 86400
        else f"{ago // 3600}h"
        if ago >= 3600
        else f"{ago // 60}m"
        if ago >= 60
        else f"{max(ago, 0)}s"
    )
    return f"{when.strftime('%Y-%m-%dT%H:%M:%SZ')} ({span} ago)"


def _annotations(annotations: dict[str, Any] | None) -> str:
    picked = [
        f"{k}: {_short(v)}"
        for k, v in sorted((annotations or {}).items())
        if k in ("summary", "description", "message", "runbook_url")
    ]
    return ("\n    " + "\n    ".join(picked)) if picked else ""


def _more(total: int, shown: int, hint: str) -> list[str]:
    return [f"[... {total - shown} more; {hint}]"] if total > shown else []


class _Alerting:
    def __init__(
        self, prometheus: _HttpJson | None, alertmanager: _HttpJson | None, scope: NamespaceScope | None
    ) -> None:
        self.prometheus = prometheus
        self.alertmanager = alertmanager
        self.scope = scope

    def _visible(self, labels: dict[str, Any] | None) -> bool:
        return self.scope is None or self.scope.allows(labels)

    def _scope_note(self) -> str:
        return f" (only {self.scope.describe()})" if self.scope else ""

    async def prometheus_alerts(self, p: Params) -> str:
        assert self.prometheus is not None
        state = p.opt_str("state")
        if state not in (None, "firing", "pending"):
            raise ToolInputError("state must be firing or pending")
        body = await self.prometheus.get("/api/v1/alerts")
        alerts = [
            a
            for a in (body.get("data") or {}).get("alerts") or []
            if self._visible(a.get("labels")) and (state is None or a.get("state") == state)
        ]
        if not alerts:
            return f"no {state or 'firing or pending'} alerts{self._scope_note()}"
        alerts.sort(key=lambda a: a.get("activeAt") or "", reverse=True)
        lines = [f"{len(alerts)} alerts{self._scope_note()}, newest first:"]
        for a in alerts[:MAX_ITEMS]:
            labels = a.get("labels") or {}
            lines.append(
                f"- {a.get('state', '?')} {labels.get('alertname', '?')} {_labels(labels)} since "
                f"{_since(a.get('activeAt'))} value={_short(a.get('value'), 40)}{_annotations(a.get('annotations'))}"
            )
        return "\n".join(lines + _more(len(alerts), MAX_ITEMS, "filter by state"))

    async def prometheus_rules(self, p: Params) -> str:
        assert self.prometheus is not None
        kind = p.opt_str("type")
        if kind not in (None, "alert", "record"):
            raise ToolInputError("type must be alert or record")
        name = p.opt_str("name")
        params = [("type", kind)] if kind else []
        if name:
            params.append(("rule_name[]", name))
        body = await self.prometheus.get("/api/v1/rules", params)
        lines: list[str] = []
        shown = total = 0
        for group in (body.get("data") or {}).get("groups") or []:
            for rule in group.get("rules") or []:
                alerts = [a for a in rule.get("alerts") or [] if self._visible(a.get("labels"))]
                if self.scope is not None and not alerts and not self.scope.allows(rule.get("labels")):
                    continue
                total += 1
                if shown >= MAX_ITEMS:
                    continue
                shown += 1
                state = rule.get("state") or rule.get("type", "?")
                error = f" lastError={_short(rule.get('lastError'))}" if rule.get("lastError") else ""
                lines.append(
                    f"- {rule.get('type', '?')} {rule.get('name', '?')} [{group.get('name', '?')}] "
                    f"{state} health={rule.get('health', '?')}{error}\n    expr: {_short(rule.get('query'), 500)}"
                )
                for a in alerts[:5]:
                    lines.append(
                        f"    {a.get('state', '?')} {_labels(a.get('labels'))} since {_since(a.get('activeAt'))}"
                    )
                if len(alerts) > 5:
                    lines.append(f"    [... {len(alerts) - 5} more alerts of this rule; prometheus_alerts lists them]")
        if not total:
            return f"no rules{self._scope_note()}"
        return "\n".join(
            [f"{total} rules{self._scope_note()}:"] + lines + _more(total, shown, "filter by type or name")
        )

    async def alertmanager_alerts(self, p: Params) -> str:
        assert self.alertmanager is not None
        params = [
            ("active", "true"),
            ("silenced", "true" if p.raw.get("include_silenced") else "false"),
            ("inhibited", "true" if p.raw.get("include_silenced") else "false"),
        ]
        for matcher in _matchers(p):
            params.append(("filter", matcher))
        alerts = [
            a for a in await self.alertmanager.get("/api/v2/alerts", params) or [] if self._visible(a.get("labels"))
        ]
        if not alerts:
            return f"no active alerts in Alertmanager{self._scope_note()}"
        alerts.sort(key=lambda a: a.get("startsAt") or "", reverse=True)
        lines = [f"{len(alerts)} alerts{self._scope_note()}, newest first:"]
        for a in alerts[:MAX_ITEMS]:
            labels = a.get("labels") or {}
            status = a.get("status") or {}
            muted = ""
            if status.get("silencedBy"):
                muted += f" silenced by {', '.join(status['silencedBy'][:3])}"
            if status.get("inhibitedBy"):
                muted += f" inhibited by {', '.join(status['inhibitedBy'][:3])}"
            lines.append(
                f"- {status.get('state', '?')} {labels.get('alertname', '?')} {_labels(labels)} since "
                f"{_since(a.get('startsAt'))}{muted}{_annotations(a.get('annotations'))}"
            )
        return "\n".join(lines + _more(len(alerts), MAX_ITEMS, "add a filter"))

    def _silence_visible(self, silence: dict[str, Any]) -> bool:
        if self.scope is None:
            return True
        return any(
            m.get("name") == self.scope.label
            and not m.get("isRegex")
            and m.get("isEqual", True)
            and m.get("value") in self.scope.namespaces
            for m in silence.get("matchers") or []
        )

    async def alertmanager_silences(self, p: Params) -> str:
        assert self.alertmanager is not None
        everything = bool(p.raw.get("include_expired"))
        silences = [
            s
            for s in await self.alertmanager.get("/api/v2/silences") or []
            if self._silence_visible(s) and (everything or (s.get("status") or {}).get("state") != "expired")
        ]
        if not silences:
            return f"no {'' if everything else 'active or pending '}silences{self._scope_note()}"
        silences.sort(key=lambda s: s.get("startsAt") or "", reverse=True)
        lines = [f"{len(silences)} silences{self._scope_note()}, newest first:"]
        for s in silences[:MAX_ITEMS]:
            matchers = ", ".join(
                f"{m.get('name')}{('=~' if m.get('isRegex') else '=') if m.get('isEqual', True) else ('!~' if m.get('isRegex') else '!=')}"
                f'"{_short(m.get("value"), 80)}"'
                for m in s.get("matchers") or []
            )
            lines.append(
                f"- {(s.get('status') or {}).get('state', '?')} {s.get('id', '?')} {{{matchers}}} by "
                f"{_short(s.get('createdBy'), 60)} from {_since(s.get('startsAt'))} until {_short(s.get('endsAt'), 30)}"
                f"\n    comment: {_short(s.get('comment'))}"
            )
        return "\n".join(lines + _more(len(silences), MAX_ITEMS, "most recent shown"))


def _matchers(p: Params) -> list[str]:
    value = p.raw.get("filter")
    if value in (None, "", []):
        return []
    items = [value] if isinstance(value, str) else value
    if (
        not isinstance(items, list)
        or not all(isinstance(i, str) and 0 < len(i) <= 200 for i in items)
        or len(items) > 10
    ):
        raise ToolInputError('filter must be a list of up to 10 matchers like alertname="KubePodCrashLooping"')
    return items


def alerting_toolset(
    prometheus_url: str | None = None,
    alertmanager_url: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    verify: bool | str = True,
    scope: NamespaceScope | None = None,
) -> Toolset:
    """Alert and rule tools for the servers that are configured; with `scope`, only what belongs
    to its namespaces."""
    view = _Alerting(
        _HttpJson(prometheus_url, headers=headers, timeout=timeout, verify=verify, what="Prometheus")
        if prometheus_url
        else None,
        _HttpJson(alertmanager_url, headers=headers, timeout=timeout, verify=verify, what="Alertmanager")
        if alertmanager_url
        else None,
        scope,
    )
    tools: list[Tool] = []
    if prometheus_url:
        tools += [
            FunctionTool(
                "prometheus_alerts",
                "Alerts Prometheus evaluates as firing or pending, newest first, with labels and summary.",
                schema(None, state={"type": "string", "enum": ["firing", "pending"]}),
                view.prometheus_alerts,
                lambda p: f"prometheus alerts {p.opt_str('state') or ''}".rstrip(),
            ),
            FunctionTool(
                "prometheus_rules",
                "Alerting and recording rules: expression, state, health, last error, the alerts each fires.",
                schema(
                    None,
                    type={"type": "string", "enum": ["alert", "record"]},
                    name={"type": "string", "description": "one rule's name"},
                ),
                view.prometheus_rules,
                lambda p: f"prometheus rules {p.opt_str('type') or ''} {p.opt_str('name') or ''}".rstrip(),
            ),
        ]
    if alertmanager_url:
        tools += [
            FunctionTool(
                "alertmanager_alerts",
                "Active alerts in Alertmanager (as routed to people), newest first; silenced and inhibited ones on request.",
                schema(
                    None,
                    filter={
                        "type": "array",
                        "items": {"type": "string"},
                        "description": 'matchers, e.g. ["alertname=\\"KubePodCrashLooping\\""]',
                    },
                    include_silenced={"type": "boolean"},
                ),
                view.alertmanager_alerts,
                lambda p: f"alertmanager alerts {' '.join(_matchers(p))}".rstrip(),
            ),
            FunctionTool(
                "alertmanager_silences",
                "Silences in Alertmanager: matchers, who, why, until when (active and pending; expired on request).",
                schema(None, include_expired={"type": "boolean"}),
                view.alertmanager_silences,
                lambda p: "alertmanager silences",
            ),
        ]
    return Toolset(
        name="alerting",
        tools=tools,
        instructions=_instructions([t.name for t in tools]) if tools else "",
        enabled=bool(tools),
        summary="; ".join(
            part
            for part, served in (
                ("firing alerts, rules", prometheus_url),
                ("Alertmanager alerts, silences", alertmanager_url),
            )
            if served
        ),
        read_only=True,
    )
