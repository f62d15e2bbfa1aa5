"""`POST /api/alertmanager` under a storm: two API processes, concurrent and repeated
deliveries, resolves — exactly the expected Investigations, and exact route counters."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from alertkit import alert, api_processes, apply_route, payload, route_status, routed_investigations
from kubernetes import client as k8s

from lestrade.triggers import Alert, investigation_name
from lestrade.triggers.naming import window_index

pytestmark = pytest.mark.usefixtures("crds")

KEY = "storm-test-key-0123456789"


@pytest.fixture
def apis(cluster: Any, namespace: str, tmp_path: Path) -> Iterator[list[str]]:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "alertmanager").write_text(KEY)
    with api_processes(Path(cluster.kubeconfig), namespace, keys, count=2) as bases:
        yield bases


def post(base: str, body: dict[str, Any], key: str | None = KEY) -> httpx.Response:
    headers = {"X-API-Key": key} if key else {}
    return httpx.post(f"{base}/api/alertmanager", json=body, headers=headers, timeout=120)


def deliver_all(deliveries: list[tuple[str, dict[str, Any]]], workers: int = 12) -> list[httpx.Response]:
    with ThreadPoolExecutor(workers) as pool:
        responses = list(pool.map(lambda d: post(*d), deliveries))
    for response in responses:
        assert response.status_code == 200, response.text
    return responses


def expected_name(route: str, raw: dict[str, Any]) -> str:
    from datetime import datetime

    starts = datetime.fromisoformat(raw["startsAt"].replace("Z", "+00:00"))
    a = Alert(labels=raw["labels"], starts_at=starts, given_fingerprint=raw["fingerprint"])
    return investigation_name(route, a, window_index(a, 3600, datetime.now(starts.tzinfo)))


def test_the_receiver_needs_the_apis_authentication(apis: list[str], namespace: str) -> None:
    response = post(apis[0], payload([alert(1, namespace)]), key=None)
    assert response.status_code == 401, response.text
    wrong = post(apis[0], payload([alert(1, namespace)]), key="not-the-key")
    assert wrong.status_code == 401, wrong.text


def test_bad_payloads_are_refused_naming_the_field(apis: list[str], namespace: str) -> None:
    old = post(apis[0], {**payload([alert(1, namespace)]), "version": "3"})
    assert old.status_code == 422 and "version" in old.text
    no_labels = post(apis[0], payload([{"status": "firing"}]))
    assert no_labels.status_code == 422 and "labels" in no_labels.text
    huge = {**alert(1, namespace), "annotations": {f"a{i}": "x" * 16000 for i in range(20)}}
    too_big = post(apis[0], payload([alert(0, namespace), huge]))
    assert too_big.status_code == 422, too_big.text
    (error,) = too_big.json()["detail"]
    assert error["loc"] == ["body", "alerts", 1] and "at most 262144" in error["msg"]
    # times UTC cannot hold, or without a zone, are ignored rather than failing the webhook
    odd = post(
        apis[0],
        payload(
            [
                {**alert(1, namespace), "startsAt": "9999-12-31T23:59:59-14:00"},
                {**alert(2, namespace), "startsAt": "2026-01-01T00:00:00"},
            ]
        ),
    )
    assert odd.status_code == 200, odd.text


def test_a_storm_creates_exactly_the_expected_investigations(
    apis: list[str], api_client: k8s.ApiClient, namespace: str
) -> None:
    names = ("KubePodCrashLooping", "KubeJobFailed", "CPUThrottlingHigh")
    severities = ("warning", "critical", "info")
    alerts = [alert(i, namespace, alertname=names[i % 3], severity=severities[(i // 3) % 3]) for i in range(300)]
    # alerts of another namespace: an Own route never sees them
    alerts += [alert(1000 + i, "elsewhere", alertname="KubePodCrashLooping") for i in range(30)]
    apply_route(
        api_client,
        namespace,
        "kube",
        matchers=[
            {"name": "alertname", "operator": "=~", "value": "KubePod.*|KubeJob.*"},
            {"name": "severity", "operator": "!=", "value": "info"},
        ],
    )
    apply_route(api_client, namespace, "critical", matchers=[{"name": "severity", "value": "critical"}])
    apply_route(api_client, namespace, "silent", matchers=[{"name": "alertname", "value": "Nothing"}])

    def matches_kube(a: dict[str, Any]) -> bool:
        labels = a["labels"]
        return (
            labels["namespace"] == namespace
            and labels["alertname"].startswith(("KubePod", "KubeJob"))
            and labels["severity"] != "info"
        )

    def matches_critical(a: dict[str, Any]) -> bool:
        return a["labels"]["namespace"] == namespace and a["labels"]["severity"] == "critical"

    expected = {
        "kube": {expected_name("kube", a) for a in alerts if matches_kube(a)},
        "critical": {expected_name("critical", a) for a in alerts if matches_critical(a)},
    }
    # 11 groups of 30, each delivered three times, alternately to both processes, all at once
    groups = [alerts[i : i + 30] for i in range(0, len(alerts), 30)]
    deliveries = [(apis[(g + r) % 2], payload(group)) for g, group in enumerate(groups) for r in range(3)]
    started = time.monotonic()
    deliver_all(deliveries)
    elapsed = time.monotonic() - started

    for route, names_expected in expected.items():
        created = routed_investigations(api_client, namespace, route)
        assert set(created) == names_expected, route
        status = route_status(api_client, namespace, route)
        n = len(names_expected)
        assert (status["matched"], status["created"], status["deduplicated"], status["dropped"]) == (
            3 * n,
            n,
            2 * n,
            0,
        ), status
        assert status["lastInvestigation"]["name"] in names_expected
        assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]
    assert routed_investigations(api_client, namespace, "silent") == {}
    print(
        f"\nstorm: {len(alerts)} alerts x 3 deliveries over 2 API processes in {elapsed:.1f}s -> "
        f"{len(expected['kube'])} + {len(expected['critical'])} Investigations, "
        f"{2 * (len(expected['kube']) + len(expected['critical']))} deduplicated"
    )

    # One Investigation carries its alert, its route and the rendered template.
    some = next(iter(routed_investigations(api_client, namespace, "kube").values()))
    fingerprint = some["metadata"]["labels"]["lestrade.dev/alert-fingerprint"]
    index = int(fingerprint, 16)
    assert some["spec"]["title"] == f"{names[index % 3]} on web-{index}"
    assert some["spec"]["context"]["alert"]["labels"]["pod"] == f"web-{index}"
    assert some["spec"]["subject"]["pod"] == f"web-{index}"

    # Resolves: 40 of the kube route's alerts, delivered twice at once to both processes.
    kube_alerts = [a for a in alerts if matches_kube(a)][:40]
    resolved = [{**a, "status": "resolved", "endsAt": "2026-11-23T04:00:00Z"} for a in kube_alerts]
    deliver_all([(apis[0], payload(resolved, "resolved")), (apis[1], payload(resolved, "resolved"))])
    after = routed_investigations(api_client, namespace, "kube")
    assert len(after) == len(expected["kube"])  # a resolve creates nothing
    resolved_names = {expected_name("kube", a) for a in kube_alerts}
    for name, item in after.items():
        annotations = item["metadata"].get("annotations") or {}
        if name in resolved_names:
            assert annotations.get("lestrade.dev/alert-resolved-at") == "2026-11-23T04:00:00Z"
            # not started (no operator here): cancelled with a reason
            assert item["status"]["phase"] == "Failed"
            (cond,) = [c for c in item["status"]["conditions"] if c["type"] == "Succeeded"]
            assert (cond["status"], cond["reason"]) == ("False", "AlertResolved")
        else:
            assert "lestrade.dev/alert-resolved-at" not in annotations
            assert "phase" not in (item.get("status") or {})
    resolved_critical = sum(1 for a in kube_alerts if matches_critical(a))
    assert route_status(api_client, namespace, "kube")["resolved"] == 40
    assert route_status(api_client, namespace, "critical")["resolved"] == resolved_critical

    # A redelivery after the storm still creates nothing new (the resolved ones are finished,
    # but their names are taken for this dedup window).
    deliver_all([(apis[1], payload(groups[0]))])
    assert set(routed_investigations(api_client, namespace, "kube")) == expected["kube"]


def test_limits_hold_across_two_processes(apis: list[str], api_client: k8s.ApiClient, namespace: str) -> None:
    apply_route(api_client, namespace, "rate", limits={"maxPerInterval": 7, "interval": "1h"})
    apply_route(api_client, namespace, "open", limits={"maxOpen": 4})
    apply_route(api_client, namespace, "paused", suspend=True)
    alerts = [alert(i, namespace) for i in range(40)]
    deliveries = [(apis[g % 2], payload(alerts[g * 5 : (g + 1) * 5])) for g in range(8)]
    deliver_all(deliveries, workers=8)
    for route, cap in (("rate", 7), ("open", 4), ("paused", 0)):
        assert len(routed_investigations(api_client, namespace, route)) == cap, route
        status = route_status(api_client, namespace, route)
        assert (status["matched"], status["created"], status["dropped"]) == (40, cap, 40 - cap), (route, status)
    # Delivered again: the created ones are deduplicated, the rest still dropped, none created.
    deliver_all(deliveries, workers=8)
    for route, cap in (("rate", 7), ("open", 4)):
        assert len(routed_investigations(api_client, namespace, route)) == cap
        status = route_status(api_client, namespace, route)
        assert (status["matched"], status["created"], status["deduplicated"], status["dropped"]) == (
            80,
            cap,
            cap,
            80 - 2 * cap,
        ), (route, status)


def test_routes_where_their_owners_keep_them(
    cluster: Any, apis: list[str], api_client: k8s.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """A route in a team's namespace sees that namespace's alerts (Own) with no setting; a route
    seeing every namespace (Any) there is honoured only where the admin allows, and says why
    not in its Ready condition."""
    other = f"{namespace[:50]}-b"
    core = k8s.CoreV1Api(api_client)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other)))
    try:
        apply_route(api_client, other, "theirs")
        apply_route(
            api_client,
            other,
            "everything",
            alertNamespace="Any",
            matchers=[{"name": "alertname", "value": "NodeNotReady"}],
        )
        node_alert = {**alert(9, ""), "labels": {"alertname": "NodeNotReady", "node": "n1", "severity": "critical"}}
        body = post(apis[0], payload([alert(7, other), alert(6, "elsewhere"), node_alert])).json()
        # Own: the alert of its namespace, created there (not the other namespace's alert)
        assert (body["matched"], body["created"]) == (1, 1), body
        (created,) = routed_investigations(api_client, other, "theirs").values()
        assert created["metadata"]["namespace"] == other and created["spec"]["subject"]["pod"] == "web-7"
        ready = {c["type"]: c for c in route_status(api_client, other, "theirs")["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("True", "Valid"), ready
        assert repr(other) in ready["message"], ready
        # Any outside the API's namespace: nothing, and the route says why (not in the webhook's answer)
        assert routed_investigations(api_client, other, "everything") == {}
        assert all(r["route"] != "everything" for r in body["routes"]), body
        ready = {c["type"]: c for c in route_status(api_client, other, "everything")["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "AnyNamespaceNotAllowed"), ready
        assert "LESTRADE_ALERT_ROUTES_ANY_NAMESPACES" in ready["message"] and repr(namespace) in ready["message"]
        keys = tmp_path / "keys-any"
        keys.mkdir()
        (keys / "alertmanager").write_text(KEY)
        with api_processes(
            Path(cluster.kubeconfig),
            namespace,
            keys,
            count=1,
            env={"LESTRADE_ALERT_ROUTES_ANY_NAMESPACES": f"unrelated,{other}"},
        ) as (base,):
            body = post(base, payload([node_alert])).json()
        assert (body["matched"], body["created"]) == (1, 1), body
        (created,) = routed_investigations(api_client, other, "everything").values()
        assert created["spec"]["subject"]["node"] == "n1"
        ready = {c["type"]: c for c in route_status(api_client, other, "everything")["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("True", "Valid"), ready
    finally:
        core.delete_namespace(other, propagation_policy="Background")
