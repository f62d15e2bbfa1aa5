"""`GET /api/info`: what HolmesGPT's introspection endpoint tells a client about this server —
its version, whether and how it authenticates, the models a request may name, and the
toolsets the runs are offered with their health.

It is authenticated like every `/api/*` endpoint (`auth.py`), so a caller without credentials
learns nothing (401), as from `/api/model`; a caller with them learns model *names* (never a
provider, an endpoint or a key) and the toolsets' state. The toolsets are the operator's, as
configured by the environment the chart gives both processes (`LESTRADE_PROMETHEUS_URL`,
`LESTRADE_ENABLE_BASH`, `LESTRADE_ENABLE_WRITE_TOOLS`); their health is what this process can
see: the Kubernetes API through its watches, Prometheus by its readiness endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import APIRouter, Request

from lestrade import __version__
from lestrade.api.holmes.services import ServicesDep

__all__ = ["router", "ToolsetSettings"]

router = APIRouter()

_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ToolsetSettings:
    """What `/api/info` reports of the operator's toolsets (the chart gives both processes the
    same variables): the API cannot ask the operator."""

    prometheus_url: str = ""
    bash: bool = True
    write_tools: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ToolsetSettings:
        def flag(name: str, default: str) -> bool:
            return (env.get(name) or default).strip().lower() in _TRUE

        return cls(
            prometheus_url=env.get("LESTRADE_PROMETHEUS_URL") or "",
            bash=flag("LESTRADE_ENABLE_BASH", "true"),
            write_tools=flag("LESTRADE_ENABLE_WRITE_TOOLS", "false"),
        )


async def _prometheus(url: str) -> dict[str, Any]:
    try:
        async with httpx.AsyncClient(timeout=2.0) as client:
            response = await client.get(f"{url.rstrip('/')}/-/ready")
    except httpx.HTTPError as exc:
        return {"status": "unhealthy", "error": f"not reachable: {type(exc).__name__}"}
    if response.status_code != 200:
        return {"status": "unhealthy", "error": f"/-/ready answered {response.status_code}"}
    return {"status": "healthy"}


async def toolsets(request: Request) -> list[dict[str, Any]]:
    watches = request.app.state.watches
    waiting = [p for p, w in watches.items() if not w.synced.is_set()]
    kubernetes = (
        {"status": "healthy"}
        if not waiting
        else {"status": "unhealthy", "error": f"not watching {', '.join(sorted(waiting))} yet"}
    )
    configured: ToolsetSettings = request.app.state.settings.toolsets
    prometheus_url = configured.prometheus_url
    rows = [
        {"name": "kubernetes", "enabled": True, **kubernetes},
        {"name": "runbooks", "enabled": True, "status": "healthy"},
        {"name": "todo", "enabled": True, "status": "healthy"},
        {
            "name": "prometheus",
            "enabled": bool(prometheus_url),
            **(await _prometheus(prometheus_url) if prometheus_url else {"status": "disabled"}),
        },
        {"name": "bash", "enabled": configured.bash},
        {"name": "kubernetes_write", "enabled": configured.write_tools},
    ]
    for row in rows:
        row.setdefault("status", "enabled" if row["enabled"] else "disabled")
    return rows


@router.get("/api/info")
async def info(request: Request, svc: ServicesDep) -> dict[str, Any]:
    """Version, authentication, models and toolsets (with their health) of this server."""
    auth = getattr(request.app.state, "authenticator", None) is not None
    return {
        "server": "lestrade",
        "version": __version__,
        "auth": {"enabled": auth, "methods": ["bearer", "api_key"] if auth else []},
        "models": [
            {"name": name, "default": name == svc.models.default_name, "demo": model.is_demo}
            for name, model in svc.models.models.items()
        ],
        "default_model": svc.models.default_name,
        "toolsets": await toolsets(request),
    }
