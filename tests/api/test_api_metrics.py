"""The API's /metrics: public (like the health checks) even with auth on, and it counts the
requests of the shared watch and the open SSE streams."""

from __future__ import annotations

import httpx
from apikit import serve
from prometheus_client.parser import text_string_to_metric_families

from lestrade.api.app import create_app
from lestrade.localcluster.processes import wait_until
from lestrade.metrics import sse_stream


def samples(base: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = httpx.get(f"{base}/metrics")  # no token: /metrics is public
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def total(found: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls)


def test_metrics_are_public_and_count_the_watch_requests(cluster, crds, namespace) -> None:
    with cluster.api_client() as api, serve(create_app(api, auth=True, namespace=namespace)) as base:
        assert httpx.get(f"{base}/api/whoami").status_code == 401  # the rest still needs a token
        wait_until("ready", lambda: httpx.get(f"{base}/readyz").status_code == 200, 30)
        found = samples(base)
        # the shared watches listed (GET) and then watched each kind
        assert total(found, "lestrade_apiserver_requests_total", verb="GET", code="200") >= 2
        assert total(found, "lestrade_apiserver_requests_total", verb="WATCH", code="200") >= 2
        opened = total(found, "lestrade_api_sse_streams_open")
        with sse_stream(), sse_stream():
            assert total(samples(base), "lestrade_api_sse_streams_open") == opened + 2
        assert total(samples(base), "lestrade_api_sse_streams_open") == opened
