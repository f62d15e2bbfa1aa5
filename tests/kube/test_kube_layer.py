"""The shared request layer over a real socket: retries on 429/5xx from its settings, no retry
on client errors, token refresh on 401, watch lines larger than aiohttp's line limit."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client as k8s

from lestrade.kube import ApiException, Kube, KubeSettings


@pytest.fixture
async def server() -> AsyncIterator[Callable[[web.Application], Any]]:
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def client_for(base: str, token: str = "first") -> k8s.ApiClient:
    cfg = k8s.Configuration(host=base)
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return k8s.ApiClient(cfg)


FAST = KubeSettings(retries=3, backoff=0.001)


async def test_retries_busy_answers_and_gives_up_after_the_configured_retries(server: Any) -> None:
    answers = [503, 429, 200]
    seen: list[int] = []

    async def flaky(request: web.Request) -> web.Response:
        status = answers[len(seen)] if len(seen) < len(answers) else 500
        seen.append(status)
        return web.json_response({"n": len(seen)}, status=status)

    async def always_500(request: web.Request) -> web.Response:
        return web.json_response({}, status=500)

    app = web.Application()
    app.router.add_get("/flaky", flaky)
    app.router.add_get("/always-500", always_500)
    base = await server(app)
    kube = Kube(client_for(base), FAST)
    try:
        assert await kube.get("/flaky") == {"n": 3}
        assert seen == [503, 429, 200]
        with pytest.raises(ApiException) as failed:
            await kube.get("/always-500")
        assert failed.value.status == 500
    finally:
        await kube.aclose()


async def test_client_errors_are_not_retried_and_401_refreshes_the_token_once(server: Any) -> None:
    calls: list[str] = []

    async def guarded(request: web.Request) -> web.Response:
        calls.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer second":
            return web.json_response({"reason": "Unauthorized"}, status=401)
        return web.json_response({"ok": True})

    async def missing(request: web.Request) -> web.Response:
        calls.append("missing")
        return web.json_response({"reason": "NotFound"}, status=404)

    app = web.Application()
    app.router.add_get("/guarded", guarded)
    app.router.add_get("/missing", missing)
    base = await server(app)
    api_client = client_for(base)

    def refresh(cfg: k8s.Configuration) -> None:
        cfg.api_key = {"authorization": "Bearer second"}

    api_client.configuration.refresh_api_key_hook = refresh
    kube = Kube(api_client, FAST)
    try:
        assert await kube.get("/guarded") == {"ok": True}
        assert calls == ["Bearer first", "Bearer second"]
        with pytest.raises(ApiException) as failed:
            await kube.get("/missing")
        assert failed.value.status == 404 and calls.count("missing") == 1
    finally:
        await kube.aclose()


async def test_watch_yields_events_larger_than_a_line_limit(server: Any) -> None:
    big = "x" * 300_000  # more than aiohttp's 128 KiB line buffer

    async def watch(request: web.Request) -> web.StreamResponse:
        assert request.query["watch"] == "true" and request.query["resourceVersion"] == "7"
        response = web.StreamResponse()
        await response.prepare(request)
        for n, value in enumerate(["small", big]):
            line = json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"o{n}"}, "v": value}})
            half = len(line) // 2
            await response.write(line[:half].encode())  # split across chunks
            await response.write(line[half:].encode() + b"\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/things", watch)
    base = await server(app)
    kube = Kube(client_for(base), FAST)
    try:
        events = [e async for e in kube.watch("/things", resource_version="7")]
    finally:
        await kube.aclose()
    assert [e["object"]["metadata"]["name"] for e in events] == ["o0", "o1"]
    assert events[1]["object"]["v"] == big
