"""The pure parts of the triggers: matching, templates, names (no cluster needed)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from lestrade.resources.alertroute import TEMPLATE_EXPRESSION, AlertRoute
from lestrade.triggers import (
    Alert,
    RouteError,
    TemplateError,
    check_template,
    compile_route,
    fingerprint_of,
    investigation_name,
    render_template,
)
from lestrade.triggers.dispatch import investigation_manifest
from lestrade.triggers.naming import window_index


def route(matchers: list[dict], **template: object) -> AlertRoute:
    return AlertRoute.model_validate(
        {
            "metadata": {"name": "crash", "namespace": "shop"},
            "spec": {
                "matchers": matchers,
                "alertNamespace": "Any",
                "investigation": {"title": "{{ labels.alertname }}", **template},
            },
        }
    )


def test_matchers_follow_alertmanager_semantics() -> None:
    compiled = compile_route(
        route(
            [
                {"name": "alertname", "operator": "=~", "value": "Kube.*Loop.*"},
                {"name": "severity", "operator": "!=", "value": "info"},
                {"name": "team", "operator": "!~", "value": "db|storage"},
                {"name": "namespace", "value": "shop"},
            ]
        )
    )
    base = {"alertname": "KubePodCrashLooping", "severity": "warning", "namespace": "shop"}
    assert compiled.matches(base)
    assert not compiled.matches({**base, "severity": "info"})
    assert not compiled.matches({**base, "team": "db"})
    assert compiled.matches({**base, "team": "web"})
    # anchored at both ends, as in Alertmanager
    assert not compiled.matches({**base, "alertname": "xKubePodCrashLooping"})
    assert not compiled.matches({**base, "namespace": "shop2"})
    # a missing label is the empty string
    assert compile_route(route([{"name": "x", "operator": "=", "value": ""}])).matches({})
    assert compile_route(route([])).matches({"anything": "at all"})


def test_own_namespace_routes_see_only_their_namespace() -> None:
    own = AlertRoute.model_validate(
        {
            "metadata": {"name": "crash", "namespace": "shop"},
            "spec": {"investigation": {"title": "t"}},
        }
    )
    compiled = compile_route(own)
    assert compiled.matches({"namespace": "shop"})
    assert not compiled.matches({"namespace": "bank"})
    assert not compiled.matches({})


def test_regex_is_linear_time_on_hostile_labels() -> None:
    compiled = compile_route(route([{"name": "a", "operator": "=~", "value": "(a+)+$"}]))
    # catastrophic for a backtracking engine, instant for RE2
    assert not compiled.matches({"a": "a" * 50_000 + "!"})


def test_bad_regex_names_the_field() -> None:
    with pytest.raises(RouteError, match=r"spec.matchers\[1\].value: not a valid RE2"):
        compile_route(route([{"name": "a", "value": "x"}, {"name": "b", "operator": "=~", "value": "(unclosed"}]))


@pytest.mark.parametrize(
    "text",
    [
        "{% for x in labels %}{{ x }}{% endfor %}",
        "{{ labels.__class__.__mro__ }}",
        "{{ labels.pod.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ labels.items() }}",
        "{{ 7*7 }}",
        "{{ labels.pod ",
        "{# hidden #}",
        "{{ labels.pod | attr('x') }}",
    ],
)
def test_templates_outside_the_grammar_are_refused(text: str) -> None:
    with pytest.raises(TemplateError):
        check_template(text)


def test_templates_render_the_alert_and_not_its_values_as_templates() -> None:
    values = {
        "labels": {"pod": "web-1", "evil": "{{ 7*7 }}", "app.kubernetes.io/name": "shop"},
        "annotations": {},
        "status": "firing",
        "fingerprint": "ab",
        "startsAt": "",
        "route": "r",
    }
    text = (
        '{{ labels.pod | upper }} {{ labels.evil }} {{ labels["app.kubernetes.io/name"] }} '
        '{{ annotations.summary | default("no summary") }} {{ labels.missing }}|'
    )
    assert render_template(text, values, 1000) == "WEB-1 {{ 7*7 }} shop no summary |"
    assert len(render_template("{{ labels.pod }}", {"labels": {"pod": "x" * 5000}}, 100)) == 100


def test_the_python_grammar_is_the_crd_grammar() -> None:
    assert re.match(TEMPLATE_EXPRESSION, "{{ labels.pod | truncate(20) | lower }}")
    assert not re.match(TEMPLATE_EXPRESSION, "{{ labels.pod.x }}")


def test_names_are_deterministic_per_window() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    alert = Alert(labels={"alertname": "A"}, starts_at=start, given_fingerprint="00ff")
    hour = 3600.0
    w0 = window_index(alert, hour, start + timedelta(minutes=59))
    w1 = window_index(alert, hour, start + timedelta(minutes=61))
    assert (w0, w1) == (0, 1)
    assert investigation_name("crash", alert, 0) == investigation_name("crash", alert, 0)
    assert investigation_name("crash", alert, 0) != investigation_name("crash", alert, 1)
    assert investigation_name("crash", alert, 0) != investigation_name("other", alert, 0)
    name = investigation_name("c" * 63, alert, 0)
    assert len(name) == 80 and re.fullmatch(r"[a-z0-9-]+", name)
    # a fingerprint that is not hex is replaced by a hash of the labels (it becomes a label value)
    odd = Alert(labels={"alertname": "A"}, given_fingerprint="../../x")
    assert odd.fingerprint == fingerprint_of({"alertname": "A"})


def test_manifest_carries_the_alert_and_the_route() -> None:
    r = route(
        [],
        description="{{ annotations.description }}",
        question="Why {{ labels.pod }}?",
        enableToolApproval=False,
        ttlSecondsAfterFinished=600,
        maxTokens=50000,
        maxCost=0.5,
    )
    alert = Alert(
        labels={"alertname": "KubePodCrashLooping", "namespace": "shop", "pod": "web-1"},
        annotations={"description": "crash looping"},
        given_fingerprint="abc123",
        starts_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    body = investigation_manifest(r, "crash-x", alert)
    assert body["metadata"]["labels"]["lestrade.dev/alert-route"] == "crash"
    assert body["metadata"]["labels"]["lestrade.dev/alert-fingerprint"] == "abc123"
    spec = body["spec"]
    assert spec["title"] == "KubePodCrashLooping"
    assert spec["description"] == "crash looping"
    assert spec["question"] == "Why web-1?"
    assert spec["subject"] == {"kind": "Alert", "name": "KubePodCrashLooping", "namespace": "shop", "pod": "web-1"}
    assert spec["context"]["alert"]["labels"]["pod"] == "web-1"
    assert spec["enableToolApproval"] is False and spec["ttlSecondsAfterFinished"] == 600
    assert (spec["maxTokens"], spec["maxCost"]) == (50000, 0.5)
