"""A tenant's Investigation, run by the operator with the product's tools, reads its own
namespace's metrics and changes, and nothing of another tenant's: a real Prometheus scrapes a
series for each namespace, the scripted model asks for the sum over every namespace and for
what changed, and the analysis quotes what the tools said."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s
from opkit import phase_is, wait_inv
from tenantkit import install_requester_policies, make_tenant, other_namespace, tenancy_setup, tenant_client

from lestrade.localcluster.processes import wait_until
from lestrade.localcluster.prometheus import PrometheusServer, ensure_prometheus
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP

pytestmark = pytest.mark.binaries("prometheus")


@pytest.fixture
def tenancy(api_client: k8s.ApiClient, namespace: str, crds: None) -> Any:
    install_requester_policies(api_client, namespace)
    with tenancy_setup(api_client, namespace) as setup:
        yield setup


@pytest.fixture
def exposition() -> Iterator[tuple[str, dict[str, str]]]:
    """A /metrics target whose text the test sets (the namespaces are made per test)."""
    served = {"text": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 — http.server's naming
            body = served["text"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


def test_a_scoped_run_reads_its_own_metrics_and_changes_only(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    tenancy: Any,
    exposition: tuple[str, dict[str, str]],
) -> None:
    target, served = exposition
    make_tenant(cluster, api_client, namespace)
    with (
        other_namespace(api_client, f"fact-{uuid.uuid4().hex[:6]}") as other,
        tenant_client(cluster, namespace) as as_tenant,
        PrometheusServer([target], binary=ensure_prometheus()) as prometheus,
    ):
        served["text"] = (
            f'lestrade_scoped_value{{namespace="{namespace}"}} 2\nlestrade_scoped_value{{namespace="{other}"}} 7919\n'
        )

        def both_scraped() -> bool:
            body = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": "count(lestrade_scoped_value)"}).json()
            return bool(body["data"]["result"]) and body["data"]["result"][0]["value"][1] == "2"

        wait_until("Prometheus to scrape both namespaces' series", both_scraped, timeout=90)
        k8s.CoreV1Api(api_client).create_namespaced_config_map(
            namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="app-config"), data={"MODE": "fast"})
        )
        model_server.add_scenario(
            Scenario(
                name=scenario_name,
                steps=[
                    Step(
                        tool_calls=[
                            ToolCall(
                                id="sum-1",
                                name="prometheus_instant_query",
                                arguments={"query": 'sum({__name__="lestrade_scoped_value", namespace=~".+"})'},
                            ),
                            ToolCall(
                                id="changes-1", name="what_changed", arguments={"namespace": namespace, "minutes": 30}
                            ),
                        ]
                    ),
                    Step(
                        content="metrics: {{ tool_output('prometheus_instant_query') }}\n"
                        "changes: {{ tool_output('what_changed') }}"
                    ),
                ],
            )
        )
        start_operator(scenario_name, tools=None, tools_prometheus_url=prometheus.url, **tenancy.settings())
        k8s.CustomObjectsApi(as_tenant).create_namespaced_custom_object(
            GROUP,
            "v1alpha1",
            namespace,
            "investigations",
            {
                "apiVersion": f"{GROUP}/v1alpha1",
                "kind": "Investigation",
                "metadata": {"name": "scoped-metrics"},
                "spec": {"title": "How much do the namespaces hold, and what changed?"},
            },
        )
        done = wait_inv(api_client, namespace, "scoped-metrics", phase_is("Succeeded", "Failed"), timeout=120)
        status = done["status"]
        assert status["phase"] == "Succeeded", status
        assert status["scope"]["cluster"] is False and status["scope"]["namespaces"] == [namespace]
        analysis = status["analysis"]
        metrics, changes = analysis.split("changes:", 1)
        assert "{} 2" in metrics and not re.search(r"\b79(19|21)\b", analysis), analysis  # not 7919, nor 2+7919
        assert f"What changed for namespace {namespace}" in changes and "configmap/app-config created" in changes, (
            changes
        )
        assert other not in analysis
