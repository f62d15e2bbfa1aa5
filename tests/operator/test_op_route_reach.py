"""`kubectl get ar` explains a route that can never match, as soon as it is applied: the
operator writes its Ready condition (reason and message) without waiting for an alert."""

from __future__ import annotations

import subprocess
from typing import Any

from kubernetes import client as k8s
from opkit import wait_until

from lestrade.localcluster.build import binary_path
from lestrade.resources.rest import request_json
from lestrade.triggers.reach import RoutePolicy

ROUTES = "/apis/lestrade.dev/v1alpha1/namespaces/{}/alertroutes"


def apply(api_client: k8s.ApiClient, namespace: str, name: str, **spec: Any) -> None:
    request_json(
        api_client,
        "POST",
        ROUTES.format(namespace),
        {
            "apiVersion": "lestrade.dev/v1alpha1",
            "kind": "AlertRoute",
            "metadata": {"name": name},
            "spec": {"investigation": {"title": "{{ labels.alertname }}"}, **spec},
        },
    )


def ready(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    status = request_json(api_client, "GET", f"{ROUTES.format(namespace)}/{name}").get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)


def kubectl(cluster: Any, *args: str) -> str:
    proc = subprocess.run(
        [str(binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_route_that_can_never_match_says_why(
    start_operator: Any, cluster: Any, api_client: k8s.ApiClient, namespace: str
) -> None:
    # the API's namespace is another one, and no namespace may have `Any` routes
    start_operator("unused", triggers_alert_routes=RoutePolicy("lestrade-api-elsewhere", frozenset()))
    apply(api_client, namespace, "own")
    apply(api_client, namespace, "any", alertNamespace="Any")
    apply(api_client, namespace, "elsewhere", matchers=[{"name": "namespace", "value": "payments"}])

    wait_until(
        "the operator to judge the three routes",
        lambda: all(ready(api_client, namespace, n) for n in ("own", "any", "elsewhere")),
        60,
    )
    own, any_, elsewhere = (ready(api_client, namespace, n) for n in ("own", "any", "elsewhere"))
    assert (own["status"], own["reason"]) == ("True", "Valid") and repr(namespace) in own["message"]
    assert (any_["status"], any_["reason"]) == ("False", "AnyNamespaceNotAllowed")
    assert "'lestrade-api-elsewhere'" in any_["message"]
    assert (elsewhere["status"], elsewhere["reason"]) == ("False", "NamespaceNeverMatches")

    table = kubectl(cluster, "get", "ar", "-n", namespace)
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert table.split()[:3] == ["NAME", "READY", "REASON"], table
    assert rows["any"][1:3] == ["False", "AnyNamespaceNotAllowed"], table
    assert rows["elsewhere"][1:3] == ["False", "NamespaceNeverMatches"], table
    assert rows["own"][1:3] == ["True", "Valid"], table
    wide = kubectl(cluster, "get", "ar", "any", "-n", namespace, "-o", "wide")
    assert "alertNamespace: Any is honoured only in the API's namespace" in wide, wide

    # fixed by its owner: Ready again
    request_json(
        api_client,
        "PATCH",
        f"{ROUTES.format(namespace)}/any",
        {"spec": {"alertNamespace": "Own"}},
        content_type="application/merge-patch+json",
    )
    wait_until(
        "the fixed route to be Ready", lambda: (ready(api_client, namespace, "any") or {}).get("status") == "True", 60
    )
