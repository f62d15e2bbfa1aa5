"""AlertRoute on a real kube-apiserver: bad routes refused with messages naming the field,
the example applied with `kubectl apply --server-side` and re-applied without drift."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from lestrade.localcluster.build import binary_path
from lestrade.resources import GROUP, VERSION
from lestrade.resources.alertroute import AlertRoute
from lestrade.resources.rest import request_json

pytestmark = pytest.mark.usefixtures("crds")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "alertroute.yaml"


def route(name: str = "r", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"investigation": {"title": "{{ labels.alertname }}"}}
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AlertRoute", "metadata": {"name": name}, "spec": body}


def create(api_client: k8s.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return request_json(api_client, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/alertroutes", body)


def refused(api_client: k8s.ApiClient, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as info:
        create(api_client, namespace, body)
    assert info.value.status == 422, info.value.body
    return json.loads(info.value.body)["message"]


def test_a_valid_route_gets_its_defaults(api_client: k8s.ApiClient, namespace: str) -> None:
    created = create(api_client, namespace, route(matchers=[{"name": "alertname", "value": "X"}]))
    parsed = AlertRoute.model_validate(created)
    assert parsed.spec.matchers[0].operator == "="
    assert parsed.spec.dedup_window == "1h" and parsed.spec.alert_namespace == "Own"
    assert parsed.spec.investigation.source == "prometheus"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"matchers": [{"name": "alert-name", "value": "x"}]}, "spec.matchers[0].name: Invalid value"),
        (
            {"matchers": [{"name": "a", "operator": "==", "value": "x"}]},
            'spec.matchers[0].operator: Unsupported value: "=="',
        ),
        (
            {"investigation": {"title": "{% for l in labels %}{{ l }}{% endfor %}"}},
            "title: only {{ ... }} expressions are allowed",
        ),
        ({"investigation": {"title": "{{ labels.pod "}}, "title: every '{{' must be closed by '}}'"),
        (
            {"investigation": {"title": "{{ labels.__class__.__mro__ }}"}},
            "title: a template expression may only read labels, annotations",
        ),
        (
            {"investigation": {"title": "ok", "question": "{{ cycler.__init__.__globals__ }}"}},
            "question: a template expression may only read",
        ),
        (
            {"investigation": {"title": "ok", "description": "{{ 7*7 }}"}},
            "description: a template expression may only read",
        ),
        ({"investigation": {"title": ""}}, "spec.investigation.title: Invalid value"),
        ({"dedupWindow": "an hour"}, 'spec.dedupWindow: Invalid value: "an hour"'),
        ({"limits": {"maxOpen": -1}}, "spec.limits.maxOpen: Invalid value: -1"),
        ({"alertNamespace": "Mine"}, 'spec.alertNamespace: Unsupported value: "Mine"'),
    ],
)
def test_bad_routes_are_refused_with_a_message_naming_the_field(
    api_client: k8s.ApiClient, namespace: str, spec: dict[str, Any], expected: str
) -> None:
    message = refused(api_client, namespace, route(**spec))
    assert expected in message, message


def test_a_bad_regex_is_refused_with_re2s_reason(api_client: k8s.ApiClient, namespace: str) -> None:
    message = refused(
        api_client,
        namespace,
        route(
            matchers=[{"name": "a", "value": "(fine: not a regex)"}, {"name": "b", "operator": "!~", "value": "a(b"}]
        ),
    )
    assert "spec.matchers[1]" in message and "missing closing )" in message, message
    assert "value: not a valid RE2 regular expression" in message, message


def test_a_route_name_must_fit_a_label_value(api_client: k8s.ApiClient, namespace: str) -> None:
    message = refused(api_client, namespace, route(name="r" * 64))
    assert "metadata.name: at most 63 characters" in message, message


def kubectl(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_example_applies_server_side_without_drift(cluster: Any, api_client: k8s.ApiClient, namespace: str) -> None:
    first = kubectl(cluster, "apply", "--server-side", "--field-manager=gitops", "-n", namespace, "-f", str(EXAMPLE))
    assert first.returncode == 0, first.stderr
    name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/alertroutes/{name}"
    before = request_json(api_client, "GET", path)
    again = kubectl(cluster, "apply", "--server-side", "--field-manager=gitops", "-n", namespace, "-f", str(EXAMPLE))
    assert again.returncode == 0, again.stderr
    after = request_json(api_client, "GET", path)
    # defaults filled in by the apiserver do not count as drift: nothing changed at all
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["metadata"]["generation"] == 1
    diff = kubectl(cluster, "diff", "--server-side", "--field-manager=gitops", "-n", namespace, "-f", str(EXAMPLE))
    assert diff.returncode == 0, diff.stdout + diff.stderr
