"""The AlertRoute resource: which alerts start an Investigation, and what it asks.

An AlertRoute is declared in Git like the rest of a cluster. The Alertmanager receiver of the
API (`POST /api/alertmanager`) matches every firing alert against the routes of its namespace
and creates, per alert fingerprint and route, one Investigation within the dedup window, from
the route's template (`lestrade.triggers` does the matching, naming and rendering, shared by
every trigger).

What the apiserver can check is checked here, so a bad route is refused at `kubectl apply`
with a message naming the field: matcher operators and label names by the schema, regular
expressions by a CEL rule (RE2, the dialect of Alertmanager and of CEL itself), and templates
by a CEL rule that allows only `{{ ... }}` expressions over the alert (no statements, no
attribute calls) — the renderer uses a sandboxed Jinja environment on top of that.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field

from lestrade.resources.common import (
    DURATION_PATTERN,
    Condition,
    WireModel,
    cel_rule,
    parse_duration,
)
from lestrade.resources.constants import ALERTROUTE_KIND, API_VERSION
from lestrade.resources.destination import DeliverTo
from lestrade.resources.investigation import MAX_STEPS_LIMIT, SectionText

__all__ = [
    "MatchOperator",
    "Matcher",
    "InvestigationTemplate",
    "RouteLimits",
    "AlertRouteSpec",
    "AlertRouteStatus",
    "AlertRoute",
    "InvestigationRef",
    "Claim",
    "RateWindow",
    "TEMPLATE_EXPRESSION",
    "TEMPLATE_TEXT",
    "TEMPLATE_VARIABLES",
    "TEMPLATE_FILTERS",
    "LABEL_NAME_PATTERN",
    "MAX_ROUTE_NAME",
    "route_name_rule",
]

LABEL_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
"""Prometheus label names: what Alertmanager's labels can be called."""

MAX_ROUTE_NAME = 63
"""Route names become label values on the Investigations they create (at most 63 characters)."""

TEMPLATE_VARIABLES = ("labels", "annotations", "status", "fingerprint", "startsAt", "route")
TEMPLATE_FILTERS = ("upper", "lower", "trim", "title")

# One `{{ ... }}` expression a template may hold: a variable, optionally a label or annotation
# by name (`labels.pod` or `labels["app.kubernetes.io/name"]`), then filters. `default("...")`
# and `truncate(N)` are the only filters with arguments. Nothing else: no calls, no
# attribute walks, no statements — so a template can only read the alert.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_KEY = r"(\." + _NAME + r'|\[\s*"[^"\\{}]*"\s*\])'
_FILTER = r"\|\s*(" + "|".join(TEMPLATE_FILTERS) + r'|default\(\s*"[^"\\{}]*"\s*\)|truncate\(\s*[0-9]{1,5}\s*\))'
_EXPRESSION = r"\{\{\s*(" + "|".join(TEMPLATE_VARIABLES) + r")" + _KEY + r"?\s*(" + _FILTER + r"\s*)*\}\}"
TEMPLATE_EXPRESSION = "^" + _EXPRESSION + "$"
"""One whole `{{ ... }}` expression."""
TEMPLATE_TEXT = r"^(?:[^{]|\{(?:[^{]|$)|" + _EXPRESSION + r")*$"
"""A whole template: plain text and allowed expressions."""


def _template_rules(field: str) -> list[dict[str, Any]]:
    """CEL rules on one template string (the apiserver's own RE2 checks each expression)."""
    return [
        cel_rule(
            "!self.contains('{%') && !self.contains('{#') && !self.contains('%}') && !self.contains('#}')",
            f"{field}: only {{{{ ... }}}} expressions are allowed in a template "
            "(no {% statements %} or {# comments #})",
        ),
        cel_rule(
            "self.split('{{').size() == self.split('}}').size() && "
            "self.findAll('[{][{]').size() == self.findAll('[{][{][^{}]*[}][}]').size()",
            f"{field}: every '{{{{' must be closed by '}}}}' with no braces in between",
        ),
        cel_rule(
            # One anchored expression over the whole text: a `{{` can only open an allowed
            # expression (a lone `{` is plain text). One `matches` keeps the rule's estimated
            # cost within the apiserver's budget, where a findAll/all pair does not.
            "self.matches('" + TEMPLATE_TEXT.replace("\\", "\\\\").replace("'", "\\'") + "')",
            f"{field}: a template expression may only read "
            + ", ".join(TEMPLATE_VARIABLES)
            + ' (e.g. {{ labels.pod }}, {{ annotations["summary"] | default("none") }}) '
            "with the filters " + ", ".join(TEMPLATE_FILTERS) + ', default("text"), truncate(N)',
        ),
    ]


def _template(max_length: int, field: str, description: str, **kwargs: Any) -> Any:
    return Field(
        max_length=max_length,
        description=description,
        json_schema_extra={"x-kubernetes-validations": _template_rules(field)},  # type: ignore[dict-item]
        **kwargs,
    )


class MatchOperator(StrEnum):
    """Alertmanager's matcher operators."""

    EQUAL = "="
    NOT_EQUAL = "!="
    REGEX = "=~"
    NOT_REGEX = "!~"


class Matcher(WireModel):
    """One condition on an alert label, as in Alertmanager's `matchers`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    # A bad expression makes `matches` fail at evaluation, and the apiserver
                    # refuses the object with RE2's own parse error after this message.
                    "!(self.operator in ['=~', '!~']) || ''.matches(self.value) || !''.matches(self.value)",
                    "value: not a valid RE2 regular expression",
                    fieldPath=".value",
                ),
            ]
        }
    )

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=LABEL_NAME_PATTERN,
        description="Label name, e.g. alertname, namespace, severity.",
    )
    operator: Literal["=", "!=", "=~", "!~"] = Field(
        default="=",
        description="= equal, != not equal, =~ matches the regular expression, !~ does not "
        "match it. Regular expressions are RE2 and anchored at both ends, as in Alertmanager.",
    )
    value: str = Field(
        default="",
        max_length=1024,
        description="The value (or regular expression) to compare with. A missing label "
        "counts as the empty string, as in Alertmanager.",
    )


class InvestigationTemplate(WireModel):
    """The Investigation to create for a matching alert. Text fields are templates:
    `{{ labels.NAME }}`, `{{ annotations.NAME }}`, `{{ status }}`, `{{ fingerprint }}`,
    `{{ startsAt }}` and `{{ route }}`, with the filters upper, lower, trim, title,
    default("text") and truncate(N)."""

    title: str = _template(
        1024,
        "title",
        "Template of the Investigation's title, e.g. "
        "'{{ labels.alertname }} on {{ labels.namespace }}/{{ labels.pod }}'. Required.",
        min_length=1,
    )
    description: str | None = _template(
        8192,
        "description",
        "Template of the description; the alert's description or summary annotation when omitted.",
        default=None,
    )
    question: str | None = _template(8192, "question", "Template of an extra question to answer.", default=None)
    source: str = Field(
        default="prometheus",
        max_length=253,
        description="The Investigation's spec.source.",
    )
    model: str | None = Field(
        default=None,
        max_length=253,
        description="Model name from the operator's modelList; the default model when omitted.",
    )
    sections: dict[str, SectionText] | None = Field(
        default=None,
        max_length=50,
        description="Sections the analysis must have (title -> what to write).",
    )
    max_steps: int | None = Field(
        default=None, ge=1, le=MAX_STEPS_LIMIT, description="The Investigation's spec.maxSteps."
    )
    timeout: str | None = Field(
        default=None,
        max_length=64,
        pattern=DURATION_PATTERN,
        description="The Investigation's spec.timeout (e.g. 10m).",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="The Investigation's spec.maxTokens (its token budget)."
    )
    max_cost: float | None = Field(
        default=None, ge=0, description="The Investigation's spec.maxCost (its budget in US dollars)."
    )
    enable_tool_approval: bool | None = Field(
        default=None,
        description="The Investigation's spec.enableToolApproval; its default (true: calls "
        "that need approval pause the run) when omitted.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        description="The Investigation's spec.ttlSecondsAfterFinished: finished "
        "Investigations of an alert storm need not stay forever.",
    )
    deliver: list[DeliverTo] | None = Field(
        default=None,
        max_length=16,
        description="The Investigation's spec.deliver: Destinations (in the route's namespace) "
        "its result is sent to, each with a condition (Always, OnFailure, OnFinding).",
    )


class RouteLimits(WireModel):
    """How many Investigations an alert storm may start."""

    max_per_interval: int | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="At most this many new Investigations per interval; further matching "
        "alerts are counted as dropped. Unlimited when omitted.",
    )
    interval: str = Field(
        default="1h",
        max_length=64,
        pattern=DURATION_PATTERN,
        description="The interval of maxPerInterval (e.g. 10m, 1h).",
    )
    max_open: int | None = Field(
        default=None,
        ge=0,
        le=10000,
        description="At most this many of the route's Investigations unfinished at once; "
        "further matching alerts are counted as dropped. Unlimited when omitted.",
    )

    def interval_seconds(self) -> float:
        return parse_duration(self.interval)


class AlertRouteSpec(WireModel):
    """Which alerts to investigate, and how."""

    matchers: list[Matcher] = Field(
        default_factory=list,
        max_length=32,
        description="Conditions on the alert's labels, all of which must hold (Alertmanager "
        "semantics). An empty list matches every alert.",
    )
    sources: list[Literal["Alertmanager", "KubernetesEvents"]] = Field(
        default_factory=lambda: ["Alertmanager"],  # type: ignore[arg-type]
        min_length=1,
        max_length=2,
        description="Where alerts come from: Alertmanager (POST /api/alertmanager) and/or "
        "KubernetesEvents (Warning Events the operator watches, for clusters without "
        "Alertmanager). An Event is matched as an alert with the labels alertname and reason "
        "(the Event's reason), kind, name and namespace (of the involved object), component "
        "and message; one Investigation per involved object and dedup window.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    alert_namespace: Literal["Own", "Any"] = Field(
        default="Own",
        description="Own: only alerts whose `namespace` label is this route's namespace (a "
        "team's route never starts Investigations about another team's alerts); Any: every "
        "alert the matchers accept (cluster-wide alerts such as node alerts have no "
        "namespace label).",
    )
    investigation: InvestigationTemplate = Field(description="The Investigation created for a matching alert.")
    dedup_window: str = Field(
        default="1h",
        max_length=64,
        pattern=DURATION_PATTERN,
        description="One Investigation per alert (fingerprint) within this window: a "
        "redelivered or still-firing alert creates no new one; after the window a still-firing "
        "alert starts a fresh Investigation.",
    )
    limits: RouteLimits = Field(
        default_factory=RouteLimits,
        description="Caps on new and open Investigations, so an alert storm cannot start hundreds of runs.",
    )
    suspend: bool = Field(
        default=False,
        description="true: matching alerts are counted but start nothing (counted as dropped).",
    )

    def dedup_seconds(self) -> float:
        return parse_duration(self.dedup_window)


class InvestigationRef(WireModel):
    """An Investigation a route created."""

    name: str = Field(description="metadata.name of the Investigation (same namespace).")
    time: datetime = Field(description="When it was created.")


class Claim(WireModel):
    """An Investigation a receiver is about to create: counted as open by the other replicas
    until their listings can see it."""

    name: str = Field(description="metadata.name of the Investigation being created.")
    time: datetime = Field(description="When the claim was made.")


class RateWindow(WireModel):
    """Bookkeeping of limits.maxPerInterval."""

    start: datetime = Field(description="Start of the current interval.")
    created: int = Field(default=0, ge=0, description="Investigations created in it.")


class AlertRouteStatus(WireModel):
    """What the route did. Written by the receivers (each update with the object's
    resourceVersion, so concurrent receivers never lose a count)."""

    matched: int = Field(default=0, ge=0, description="Firing alerts that matched, redeliveries included.")
    created: int = Field(default=0, ge=0, description="Investigations created.")
    deduplicated: int = Field(
        default=0, ge=0, description="Matching alerts that already had an Investigation in the dedup window."
    )
    dropped: int = Field(
        default=0, ge=0, description="Matching alerts that started nothing: a limit, suspend, or an error."
    )
    resolved: int = Field(default=0, ge=0, description="Resolved alerts recorded on their Investigation.")
    last_investigation: InvestigationRef | None = Field(default=None, description="The Investigation created last.")
    window: RateWindow | None = Field(default=None, description="limits.maxPerInterval bookkeeping.")
    claims: list[Claim] = Field(
        default_factory=list,
        max_length=10000,
        description="limits.maxOpen bookkeeping: creations in flight.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready: whether the route is usable (False names the problem).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this status reflects."
    )


class AlertRoute(WireModel):
    """An AlertRoute as read from the apiserver."""

    api_version: Literal["lestrade.dev/v1alpha1"] = Field(default=API_VERSION)
    kind: Literal["AlertRoute"] = Field(default=ALERTROUTE_KIND)
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: AlertRouteSpec
    status: AlertRouteStatus = Field(default_factory=AlertRouteStatus)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")


def route_name_rule() -> dict[str, Any]:
    """Root rule: the route's name fits in a label value (its Investigations carry it)."""
    return cel_rule(
        f"self.metadata.name.size() <= {MAX_ROUTE_NAME}",
        f"metadata.name: at most {MAX_ROUTE_NAME} characters (the route's Investigations carry it as a label value)",
    )
