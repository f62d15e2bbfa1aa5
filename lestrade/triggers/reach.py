"""Which alerts a route can ever see, decided before any alert arrives.

Teams keep their AlertRoutes in their own namespaces, next to their PrometheusRules. A route
there sees the alerts whose `namespace` label is that namespace (`alertNamespace: Own`): its
owner opted in, and it can never start an Investigation about another team's alerts. A route
that sees every namespace (`alertNamespace: Any`, cluster-wide alerts such as node alerts) is
honoured only in the API's namespace, or in the namespaces the admin allows
(`LESTRADE_ALERT_ROUTES_ANY_NAMESPACES`: a comma-separated list, `*` for all;
`LESTRADE_ALERT_ROUTES_ALL_NAMESPACES=true` is the same as `*`).

`never_matches` names why a route can see no alert at all, so its Ready condition (written
by the operator when the route changes, and by the receivers) says so instead of the route
silently doing nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import re2

from lestrade.resources.alertroute import AlertRoute

__all__ = ["RoutePolicy", "never_matches", "ready_message", "REASON_ANY_NOT_ALLOWED", "REASON_NAMESPACE_EXCLUDED"]

REASON_ANY_NOT_ALLOWED = "AnyNamespaceNotAllowed"
REASON_NAMESPACE_EXCLUDED = "NamespaceNeverMatches"

_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class RoutePolicy:
    """Where routes of each kind are honoured."""

    api_namespace: str
    any_namespaces: frozenset[str] | None = frozenset()
    """Namespaces besides the API's whose `Any` routes are honoured; None: every namespace."""

    @classmethod
    def from_env(cls, api_namespace: str, env: Mapping[str, str] | None = None) -> RoutePolicy:
        env = os.environ if env is None else env
        listed = [n.strip() for n in env.get("LESTRADE_ALERT_ROUTES_ANY_NAMESPACES", "").split(",") if n.strip()]
        if "*" in listed or env.get("LESTRADE_ALERT_ROUTES_ALL_NAMESPACES", "").strip().lower() in _TRUE:
            return cls(api_namespace, None)
        return cls(api_namespace, frozenset(listed))

    def allows_any(self, namespace: str) -> bool:
        return namespace == self.api_namespace or self.any_namespaces is None or namespace in self.any_namespaces


def _excludes(operator: str, value: str, namespace: str) -> bool:
    """Whether a matcher on the `namespace` label rejects `namespace`."""
    if operator == "=":
        return value != namespace
    if operator == "!=":
        return value == namespace
    try:
        matches = re2.match(f"^(?:{value})$", namespace) is not None
    except re2.error:
        return False  # an invalid expression is reported by compile_route
    return not matches if operator == "=~" else matches


def never_matches(route: AlertRoute, policy: RoutePolicy) -> tuple[str, str] | None:
    """(reason, message) when the route can see no alert at all, else None."""
    namespace = route.namespace
    spec = route.spec
    if spec.alert_namespace == "Any" and not policy.allows_any(namespace):
        return REASON_ANY_NOT_ALLOWED, (
            f"alertNamespace: Any is honoured only in the API's namespace {policy.api_namespace!r} "
            "or where the admin allows it (LESTRADE_ALERT_ROUTES_ANY_NAMESPACES, chart value "
            f"api.alertRoutesAnyNamespaces), so this route sees no alert; alertNamespace: Own sees "
            f"the alerts whose namespace label is {namespace!r}"
        )
    if spec.alert_namespace == "Own":
        for index, matcher in enumerate(spec.matchers):
            if matcher.name == "namespace" and _excludes(str(matcher.operator), matcher.value, namespace):
                return REASON_NAMESPACE_EXCLUDED, (
                    f"spec.matchers[{index}] ({matcher.name} {matcher.operator} {matcher.value!r}) rejects "
                    f"{namespace!r}, and alertNamespace: Own only sees alerts whose namespace label is "
                    f"{namespace!r}: this route can never match"
                )
    return None


def ready_message(route: AlertRoute) -> str:
    """The message of a usable route's Ready condition: what it sees."""
    sees = (
        "every alert the matchers accept"
        if route.spec.alert_namespace == "Any"
        else f"the alerts whose namespace label is {route.namespace!r}"
    )
    return f"The route sees {sees} and creates Investigations"
