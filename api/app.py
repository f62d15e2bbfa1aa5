"""The FastAPI application: health, readiness, and (in later issues) the HolmesGPT-compatible
endpoints, all backed by the same custom resources the operator works on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from kubernetes import client as k8s

from lestrade.resources import GROUP, VERSION

from .auth import AuthMiddleware, TokenAuthenticator
from .watch import SharedWatch

__all__ = ["create_app"]

WATCHED = ("investigations", "conversations")


def create_app(
    api_client: k8s.ApiClient, *, auth: bool = False, namespace: str = "default"
) -> FastAPI:
    """The app; with `auth`, every endpoint but health checks needs a Kubernetes bearer token
    whose owner may create Investigations in `namespace` (see `auth.py`)."""
    watches = {plural: SharedWatch(api_client, GROUP, VERSION, plural) for plural in WATCHED}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for watch in watches.values():
            watch.start()
        try:
            yield
        finally:
            for watch in watches.values():
                await watch.stop()

    app = FastAPI(title="Lestrade", version="0.1.0", lifespan=lifespan)
    app.state.watches = watches
    app.state.namespace = namespace
    if auth:
        app.add_middleware(AuthMiddleware, authenticator=TokenAuthenticator(api_client, namespace))

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
            for plural, watch in watches.items()
            if not watch.synced.is_set()
        }
        if waiting:
            return JSONResponse({"status": "not ready", "waiting": waiting}, status_code=503)
        return JSONResponse({"status": "ready", "watching": list(watches)})

    return app
