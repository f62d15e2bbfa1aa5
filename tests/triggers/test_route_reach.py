"""Which alerts a route can ever see (`lestrade.triggers.reach`), without a cluster."""

from __future__ import annotations

import pytest

from lestrade.resources.alertroute import AlertRoute
from lestrade.triggers import RoutePolicy, never_matches


def route(namespace: str, alert_namespace: str = "Own", matchers: list[dict] | None = None) -> AlertRoute:
    return AlertRoute.model_validate(
        {
            "metadata": {"name": "r", "namespace": namespace},
            "spec": {
                "alertNamespace": alert_namespace,
                "matchers": matchers or [],
                "investigation": {"title": "{{ labels.alertname }}"},
            },
        }
    )


def test_own_routes_are_honoured_in_every_namespace() -> None:
    policy = RoutePolicy("lestrade")
    assert never_matches(route("shop"), policy) is None
    assert never_matches(route("lestrade"), policy) is None


def test_any_routes_only_where_the_admin_allows() -> None:
    policy = RoutePolicy("lestrade", frozenset({"platform"}))
    assert never_matches(route("lestrade", "Any"), policy) is None
    assert never_matches(route("platform", "Any"), policy) is None
    reason, message = never_matches(route("shop", "Any"), policy)
    assert reason == "AnyNamespaceNotAllowed"
    assert "'lestrade'" in message and "alertNamespace: Own" in message and "'shop'" in message
    assert never_matches(route("shop", "Any"), RoutePolicy("lestrade", None)) is None


@pytest.mark.parametrize(
    "env, allowed",
    [
        ({}, frozenset()),
        ({"LESTRADE_ALERT_ROUTES_ANY_NAMESPACES": " a, b ,"}, frozenset({"a", "b"})),
        ({"LESTRADE_ALERT_ROUTES_ANY_NAMESPACES": "a,*"}, None),
        ({"LESTRADE_ALERT_ROUTES_ALL_NAMESPACES": "true"}, None),
        ({"LESTRADE_ALERT_ROUTES_ALL_NAMESPACES": "false"}, frozenset()),
    ],
)
def test_policy_from_the_environment(env: dict[str, str], allowed: frozenset[str] | None) -> None:
    assert RoutePolicy.from_env("lestrade", env).any_namespaces == allowed


@pytest.mark.parametrize(
    "matcher, excluded",
    [
        ({"name": "namespace", "operator": "=", "value": "payments"}, True),
        ({"name": "namespace", "operator": "=", "value": "shop"}, False),
        ({"name": "namespace", "operator": "!=", "value": "shop"}, True),
        ({"name": "namespace", "operator": "=~", "value": "pay.*"}, True),
        ({"name": "namespace", "operator": "=~", "value": "sh.*"}, False),
        ({"name": "namespace", "operator": "!~", "value": "sh.*|x"}, True),
        ({"name": "namespace", "operator": "=~", "value": "("}, False),  # invalid: compile_route reports it
        ({"name": "pod", "operator": "=", "value": "payments"}, False),
    ],
)
def test_own_routes_whose_matchers_reject_their_namespace(matcher: dict, excluded: bool) -> None:
    verdict = never_matches(
        route("shop", matchers=[{"name": "alertname", "value": "X"}, matcher]), RoutePolicy("lestrade")
    )
    if excluded:
        reason, message = verdict
        assert reason == "NamespaceNeverMatches" and message.startswith("spec.matchers[1] (namespace ")
    else:
        assert verdict is None
    # under Any the namespace matcher is the route's own business
    assert never_matches(route("lestrade", "Any", [matcher]), RoutePolicy("lestrade")) is None
