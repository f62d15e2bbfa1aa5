"""Fixtures for the tool tests: a real Prometheus fed by a tiny /metrics endpoint, workload helpers.

Prometheus is the real binary built from Go modules (`ensure_prometheus`); the test serves known
series over HTTP and Prometheus scrapes them every second, so queries return data we can assert
on. Readiness is waited for on conditions (series present, enough samples), never by sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.localcluster.prometheus import PrometheusServer, ensure_prometheus

TOLERATE_KWOK = [k8s.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists")]


class _Metrics:
    """Counters that grow on every scrape, and fixed gauges."""

    def __init__(self) -> None:
        self.scrapes = 0
        self.lock = threading.Lock()

    def render(self) -> bytes:
        with self.lock:
            self.scrapes += 1
            n = self.scrapes
        return (
            "# HELP lestrade_test_requests_total Requests served.\n"
            "# TYPE lestrade_test_requests_total counter\n"
            f'lestrade_test_requests_total{{path="/api",code="200"}} {n * 10}\n'
            f'lestrade_test_requests_total{{path="/api",code="500"}} {n}\n'
            "# HELP lestrade_test_memory_bytes Working set.\n"
            "# TYPE lestrade_test_memory_bytes gauge\n"
            'lestrade_test_memory_bytes{pod="web-1",namespace="shop"} 52428800\n'
            'lestrade_test_memory_bytes{pod="web-2",namespace="shop"} 67108864\n'
        ).encode()


@pytest.fixture(scope="session")
def metrics_target() -> Iterator[str]:
    metrics = _Metrics()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 — http.server's naming
            body = metrics.render() if self.path.startswith("/metrics") else b"not found"
            self.send_response(200 if self.path.startswith("/metrics") else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def prometheus(metrics_target: str) -> Iterator[str]:
    """Base URL of a running Prometheus that has scraped the test target several times."""
    binary = ensure_prometheus()
    with PrometheusServer([metrics_target], binary=binary) as server:

        def has_history() -> bool:
            response = httpx.get(
                f"{server.url}/api/v1/query",
                params={"query": 'count_over_time(lestrade_test_memory_bytes{pod="web-1"}[5m])'},
            )
            result = response.json()["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) >= 4

        wait_until("Prometheus to hold 4 scrapes of the test target", has_history, timeout=90)
        yield server.url


@pytest.fixture
def make_pod(api_client: k8s.ApiClient) -> Callable[..., k8s.V1Pod]:
    """Create a Pod on a KWOK node and wait until the wanted condition holds."""
    core = k8s.CoreV1Api(api_client)

    def create(
        namespace: str,
        name: str,
        *,
        containers: list[k8s.V1Container] | None = None,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        until: Callable[[k8s.V1Pod], bool] | None = None,
    ) -> k8s.V1Pod:
        core.create_namespaced_pod(
            namespace,
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name=name, annotations=annotations, labels=labels or {"app": name}),
                spec=k8s.V1PodSpec(
                    containers=containers or [k8s.V1Container(name="app", image="example.com/app:1.0")],
                    tolerations=TOLERATE_KWOK,
                ),
            ),
        )
        check = until or (lambda p: p.status.phase == "Running")
        wait_until(f"pod {namespace}/{name}", lambda: check(core.read_namespaced_pod(name, namespace)), 60)
        return core.read_namespaced_pod(name, namespace)

    return create
