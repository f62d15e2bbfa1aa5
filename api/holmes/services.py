"""What the endpoints share: one per app, built by `create_app`, found on `app.state`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from lestrade.api.base.follow import Follower
from lestrade.api.base.watch import SharedWatch
from lestrade.api.holmes.chats import ChatStore
from lestrade.config import ModelList
from lestrade.kube import Kube

__all__ = ["Services", "services", "ServicesDep"]


@dataclass
class Services:
    kube: Kube
    watches: dict[str, SharedWatch]
    follower: Follower
    chats: ChatStore
    models: ModelList
    namespace: str
    keepalive: float
    wait_timeout: float
    """Seconds a JSON endpoint waits for a run to end before answering 504."""


def services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


ServicesDep = Annotated[Services, Depends(services)]
"""A route's parameter `svc: ServicesDep`: the app's services, as FastAPI's dependency."""
