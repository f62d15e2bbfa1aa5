"""An AlertRoute's matchers, compiled once and applied to many alerts.

Regular expressions are RE2 (google-re2), anchored at both ends as Alertmanager anchors them:
the labels come from whoever can post alerts, and RE2 matches in linear time whatever they
hold. A route the apiserver accepted can still fail here (an expression RE2 in Go accepts and
the Python binding does not, a template Jinja cannot parse): `RouteError` says which field,
and the dispatcher reports it in the route's Ready condition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import re2

from lestrade.resources.alertroute import AlertRoute, Matcher
from lestrade.triggers.templates import TemplateError, check_template

__all__ = ["CompiledRoute", "RouteError", "compile_route", "compile_matcher"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad expression is reported to the route's status, not stderr


class RouteError(ValueError):
    """The route cannot be used; the message names the field."""


Predicate = Callable[[Mapping[str, str]], bool]


def compile_matcher(matcher: Matcher, field: str) -> Predicate:
    name, value, op = matcher.name, matcher.value, matcher.operator
    if op in ("=", "!="):
        equal = op == "="
        return lambda labels: (labels.get(name, "") == value) is equal
    try:
        expression = re2.compile(f"^(?:{value})$", _OPTIONS)
    except re2.error as exc:
        raise RouteError(f"{field}.value: not a valid RE2 regular expression: {exc}") from None
    wanted = op == "=~"
    return lambda labels: (expression.match(labels.get(name, "")) is not None) is wanted


@dataclass(frozen=True)
class CompiledRoute:
    route: AlertRoute
    predicates: tuple[Predicate, ...]

    @property
    def name(self) -> str:
        return self.route.name

    @property
    def namespace(self) -> str:
        return self.route.namespace

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(p(labels) for p in self.predicates)


def compile_route(route: AlertRoute) -> CompiledRoute:
    """The route ready to match, or RouteError naming the bad field."""
    predicates = tuple(compile_matcher(m, f"spec.matchers[{i}]") for i, m in enumerate(route.spec.matchers))
    if route.spec.alert_namespace == "Own":
        own = route.namespace
        predicates += (lambda labels: labels.get("namespace") == own,)
    template = route.spec.investigation
    for field in ("title", "description", "question"):
        text = getattr(template, field)
        if text is None:
            continue
        try:
            check_template(text)
        except TemplateError as exc:
            raise RouteError(f"spec.investigation.{field}: {exc}") from None
    return CompiledRoute(route, predicates)
