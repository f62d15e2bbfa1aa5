"""Warning Events as alerts: routes with source KubernetesEvents, one Investigation per involved
object, the routes' limits, old and Normal Events ignored."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from opkit import wait_until

from lestrade.modelserver import Scenario, Step
from lestrade.resources.rest import request_json

ANSWER = "# Alert Explanation\nThe image tag does not exist.\n\n# Next Steps\nFix the tag."


def route(api_client: k8s.ApiClient, namespace: str, name: str, **spec: Any) -> None:
    request_json(
        api_client,
        "POST",
        f"/apis/lestrade.dev/v1alpha1/namespaces/{namespace}/alertroutes",
        {
            "apiVersion": "lestrade.dev/v1alpha1",
            "kind": "AlertRoute",
            "metadata": {"name": name},
            "spec": {
                "sources": ["KubernetesEvents"],
                "investigation": {"title": "{{ labels.reason }} on {{ labels.kind }} {{ labels.name }}"},
                **spec,
            },
        },
    )


def status(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return (
        request_json(api_client, "GET", f"/apis/lestrade.dev/v1alpha1/namespaces/{namespace}/alertroutes/{name}").get(
            "status"
        )
        or {}
    )


def routed(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    items = k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "investigations", label_selector=f"lestrade.dev/alert-route={name}"
    )["items"]
    return {i["metadata"]["name"]: i for i in items}


def post_event(
    api_client: k8s.ApiClient,
    namespace: str,
    kind: str,
    name: str,
    reason: str,
    message: str,
    type_: str = "Warning",
    age: timedelta = timedelta(0),
) -> None:
    when = (datetime.now(UTC) - age).strftime("%Y-%m-%dT%H:%M:%SZ")
    k8s.CoreV1Api(api_client).create_namespaced_event(
        namespace,
        {
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:10]}"},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace, "apiVersion": "v1"},
            "reason": reason,
            "message": message,
            "type": type_,
            "firstTimestamp": when,
            "lastTimestamp": when,
            "count": 1,
            "source": {"component": "kubelet"},
        },
    )


def test_warning_events_start_one_investigation_per_object_within_the_limits(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER)]))
    route(
        api_client,
        namespace,
        "pod-trouble",
        matchers=[
            {"name": "kind", "value": "Pod"},
            {"name": "reason", "operator": "=~", "value": "BackOff|Failed"},
            {"name": "message", "operator": "!~", "value": ".*ignore-me.*"},
        ],
    )
    route(api_client, namespace, "one-only", limits={"maxPerInterval": 1}, matchers=[{"name": "kind", "value": "Pod"}])
    start_operator(scenario_name, triggers_event_batch_seconds=0.5)
    for reason in ("BackOff", "Failed", "BackOff", "Failed", "BackOff"):
        post_event(api_client, namespace, "Pod", "web-1", reason, f"Back-off pulling image web:9 ({reason})")
    for reason in ("Failed", "BackOff", "BackOff"):
        post_event(api_client, namespace, "Pod", "web-2", reason, "Failed to pull image")
    post_event(api_client, namespace, "Pod", "web-3", "BackOff", "please ignore-me")  # message regex
    post_event(api_client, namespace, "Pod", "web-4", "Scheduled", "fine", type_="Normal")  # not a warning
    post_event(api_client, namespace, "Node", "node-1", "BackOff", "not a pod")  # kind
    post_event(api_client, namespace, "Pod", "web-5", "BackOff", "long ago", age=timedelta(hours=2))  # too old

    wait_until("the events counted", lambda: status(api_client, namespace, "pod-trouble").get("matched") == 8, 60)
    created = routed(api_client, namespace, "pod-trouble")
    subjects = sorted(i["spec"]["subject"]["name"] for i in created.values())
    assert subjects == ["web-1", "web-2"], subjects
    s = status(api_client, namespace, "pod-trouble")
    assert (s["matched"], s["created"], s["deduplicated"], s["dropped"]) == (8, 2, 6, 0), s
    one = next(i for i in created.values() if i["spec"]["subject"]["name"] == "web-1")
    assert one["spec"]["title"] in ("BackOff on Pod web-1", "Failed on Pod web-1")
    assert one["spec"]["subject"] == {"kind": "Pod", "name": "web-1", "namespace": namespace}
    assert one["spec"]["context"]["alert"]["labels"]["component"] == "kubelet"

    # the same limits as for alerts: one per interval, the other objects dropped
    wait_until("limited route counted", lambda: status(api_client, namespace, "one-only").get("matched") == 9, 60)
    s = status(api_client, namespace, "one-only")
    assert (s["created"], len(routed(api_client, namespace, "one-only"))) == (1, 1), s
    # three Pods: one got the interval's only Investigation; Events of the other two are
    # dropped (how many depends on how the burst was batched), the rest deduplicated
    assert s["dropped"] >= 2 and s["dropped"] + s["deduplicated"] == 8, s
