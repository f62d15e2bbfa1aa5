"""The FastAPI application: health, readiness, and the HolmesGPT-compatible endpoints
(`holmes/`), the other reference documents' packages (`hosted/`, `harness/`, `contexts/`), and
what other agents use (`agents/`: MCP, A2A, past findings), all backed by the same custom
resources the operator works on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from kubernetes import client as k8s
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lestrade.api import alertmanager as routes_alertmanager
from lestrade.api.agents import findings_routes
from lestrade.api.agents.lazy import install_agents
from lestrade.api.base.auth import AuthMiddleware, TokenAuthenticator
from lestrade.api.base.browser import LocalOnly
from lestrade.api.base.findings import Findings
from lestrade.api.base.follow import Follower, TranscriptCache
from lestrade.api.base.limits import DEFAULT_MAX_BODY, RequestLimits
from lestrade.api.base.watch import SharedWatch
from lestrade.api.console import routes as console
from lestrade.api.contexts import routes as routes_contexts
from lestrade.api.contexts.store import ContextStore
from lestrade.api.decisions import routes as routes_decisions
from lestrade.api.harness import routes as routes_harness
from lestrade.api.holmes import routes_chat, routes_info, routes_investigate
from lestrade.api.holmes.chats import ChatStore, ClientError
from lestrade.api.holmes.services import Services
from lestrade.api.holmes.sse import KEEPALIVE_SECONDS
from lestrade.api.holmes.streams import ClientGone
from lestrade.api.hosted import routes as routes_hosted
from lestrade.api.hosted.accounts import HostedSettings
from lestrade.api.settings import ApiSettings
from lestrade.api.slack import routes as routes_slack
from lestrade.config import ModelList, load_model_list
from lestrade.decision_links import load_key
from lestrade.kube import Kube

__all__ = ["create_app"]

WATCHED = ("investigations", "conversations")


def create_app(
    api_client: k8s.ApiClient,
    *,
    settings: ApiSettings | None = None,
    auth: bool | None = None,
    namespace: str | None = None,
    models: ModelList | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    keepalive: float = KEEPALIVE_SECONDS,
    wait_timeout: float | None = None,
    api_keys: Mapping[str, str] | None = None,
    hosted: HostedSettings | None = None,
    slack: routes_slack.SlackSettings | None = None,
    decision_key: bytes | None = None,
) -> FastAPI:
    """The app, configured by `settings` (default: `ApiSettings.from_env()`, the only place the
    API reads its environment); the other arguments replace one setting each (tests, embedding).

    With `auth`, every endpoint but health checks needs a Kubernetes bearer token whose owner may
    create Investigations in `namespace` (see `auth.py`). Requests become resources in
    `namespace`; `models` are the names a request's `model` may use; `api_keys` (name -> key)
    are accepted besides Kubernetes tokens; `hosted` is the account and cluster names of the
    hosted chat API."""
    settings = settings or ApiSettings.from_env()
    overrides: dict[str, Any] = {
        "auth": auth,
        "namespace": namespace,
        "models": models,
        "wait_timeout": wait_timeout,
        "api_keys": api_keys,
        "hosted": hosted,
        "slack": slack,
    }
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    namespace = settings.namespace
    kube = Kube(api_client)  # its connections open in the server's event loop, on first use
    watches = {plural: SharedWatch(kube, plural) for plural in WATCHED}
    models = settings.models or load_model_list(env={})
    follower = Follower(kube, watches, TranscriptCache(kube))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for watch in app.state.watches.values():
            watch.start()
        try:
            yield
        finally:
            for agent in agents:
                await agent.aclose()
            for watch in app.state.watches.values():
                await watch.stop()
            await kube.aclose()

    app = FastAPI(title="Lestrade", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.watches = watches
    app.state.kube = kube
    app.state.namespace = namespace
    app.state.services = Services(
        kube=kube,
        watches=watches,
        follower=follower,
        chats=ChatStore(kube, follower, namespace),
        models=models,
        namespace=namespace,
        keepalive=keepalive,
        wait_timeout=settings.wait_timeout,
    )
    app.add_middleware(RequestLimits, max_body=max_body)
    if not settings.auth:
        app.add_middleware(LocalOnly)  # outside RequestLimits: sees the Content-Type as sent
    if settings.auth:
        app.state.authenticator = TokenAuthenticator(kube, namespace)
        app.add_middleware(
            AuthMiddleware,
            authenticator=app.state.authenticator,
            api_keys=settings.api_keys,
        )
    app.include_router(routes_chat.router)
    app.include_router(routes_info.router)  # GET /api/info
    app.include_router(routes_investigate.router)
    app.include_router(console.router)  # the web console at / (console.py)
    app.include_router(routes_alertmanager.router)
    routes_contexts.install(app, ContextStore(kube, namespace))
    app.state.hosted = settings.hosted
    app.include_router(routes_hosted.router)
    app.include_router(routes_harness.router)  # reference 003: /chat, /chat/relay/{id}
    app.state.slack = settings.slack
    app.include_router(routes_slack.router)  # Approve/Deny buttons of Slack messages
    app.state.decision_key = decision_key or load_key(settings.decision_key_file)
    app.include_router(routes_decisions.router)  # signed decision links of webhooks
    app.state.findings = Findings(watches)  # past findings, from the shared watches
    app.include_router(findings_routes.router)  # /api/findings
    agents = install_agents(app)  # /mcp (MCP server), /a2a and its card (A2A agent), built on first use

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nobody reads it; the run goes on

    @app.exception_handler(ClientError)
    async def client_error(request: Request, exc: ClientError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus metrics of this process (request layer, SSE streams: no namespaces, no
        content), public like the health checks (auth.PUBLIC_PATHS)."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/whoami")
    async def whoami(request: Request) -> dict[str, str | None]:
        """Who the API thinks the caller is (empty when authentication is off)."""
        return {"user": getattr(request.state, "user", None), "namespace": namespace}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        waiting = {
            plural: watch.last_error or "not synced yet"
            for plural, watch in app.state.watches.items()
            if not watch.synced.is_set()
        }
        if waiting:
            return JSONResponse({"status": "not ready", "waiting": waiting}, status_code=503)
        return JSONResponse({"status": "ready", "watching": list(watches)})

    return app
