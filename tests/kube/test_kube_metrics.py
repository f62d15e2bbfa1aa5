"""The request layer counts every try by verb and status code, and the tries that got no
answer, over real sockets; counting costs well under a microsecond per request."""

from __future__ import annotations

import time

import pytest
from aiohttp import web
from kubernetes import client as k8s
from prometheus_client import REGISTRY

from lestrade.kube import ApiException, Kube, KubeSettings
from lestrade.localcluster.cluster import free_port
from lestrade.metrics import count_apiserver_request

FAST = KubeSettings(retries=2, backoff=0.001, request_timeout=5)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def client_for(base: str) -> k8s.ApiClient:
    return k8s.ApiClient(k8s.Configuration(host=base))


async def test_requests_are_counted_by_verb_and_code() -> None:
    answers = [503, 200]

    async def flaky(request: web.Request) -> web.Response:
        return web.json_response({}, status=answers.pop(0) if answers else 404)

    app = web.Application()
    app.router.add_patch("/thing", flaky)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kube = Kube(client_for(f"http://127.0.0.1:{port}"), FAST)
    before = {
        code: sample("lestrade_apiserver_requests_total", verb="PATCH", code=code) for code in ("200", "503", "404")
    }
    try:
        await kube.patch("/thing", {"a": 1})  # 503, retried, then 200
        with pytest.raises(ApiException):
            await kube.patch("/thing", {"a": 1})  # 404: not retried
    finally:
        await kube.aclose()
        await runner.cleanup()
    for code in ("200", "503", "404"):
        assert sample("lestrade_apiserver_requests_total", verb="PATCH", code=code) == before[code] + 1, code


async def test_tries_without_an_answer_are_errors() -> None:
    kube = Kube(client_for(f"http://127.0.0.1:{free_port()}"), FAST)  # nothing listens there
    before = sample("lestrade_apiserver_request_errors_total", verb="GET", reason="connection")
    try:
        with pytest.raises(OSError):
            await kube.get("/nothing")
    finally:
        await kube.aclose()
    assert sample("lestrade_apiserver_request_errors_total", verb="GET", reason="connection") == before + 3


def test_counting_is_cheap() -> None:
    """The operator makes thousands of requests a minute: one count must stay far below the
    cost of the request itself (~100 µs and more)."""
    count_apiserver_request("GET", 200)
    n = 100_000
    started = time.perf_counter()
    for _ in range(n):
        count_apiserver_request("GET", 200)
    per_call = (time.perf_counter() - started) / n
    assert per_call < 5e-6, f"{per_call * 1e6:.2f} µs per count"
