"""Kubernetes Events for a run's milestones (what `kubectl describe inv` and `kubectl get events`
show): started, waiting for approval, resumed, succeeded, failed.

Events are posted in the background: a slow or failing Event write must never hold up the run,
and a lost Event is acceptable (status is the source of truth). The same recorder works in the
operator and in a Job's pod, which is why it does not use Kopf's event poster (that one only
lives inside a running Kopf operator).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from typing import Literal

from lestrade.kube import Kube, api_path
from lestrade.timefmt import now_iso

__all__ = ["EventRecorder"]

logger = logging.getLogger(__name__)

COMPONENT = "lestrade-operator"


class EventRecorder:
    """Posts core/v1 Events about one object; `drain()` waits for all in flight (a process that
    exits after a run, like a Job's pod, calls it last)."""

    _tasks: set[asyncio.Task[None]] = set()  # of every recorder: none must be waited for by a run

    def __init__(
        self, kube: Kube, involved: Mapping[str, str], component: str = COMPONENT, instance: str | None = None
    ):
        """`involved` is {apiVersion, kind, name, namespace, uid} of the object; `instance` the
        reporting instance (the pod's name, from the settings; else the host name)."""
        self._kube = kube
        self._involved = dict(involved)
        self._component = component
        self._instance = instance or socket.gethostname()

    def post(
        self,
        reason: str,
        message: str,
        type: Literal["Normal", "Warning"] = "Normal",  # noqa: A002
    ) -> None:
        task = asyncio.create_task(self._post(reason, message, type), name=f"event {reason}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, reason: str, message: str, type: str) -> None:  # noqa: A002
        namespace = self._involved["namespace"]
        now = now_iso()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self._involved['name']}.", "namespace": namespace},
            "involvedObject": self._involved,
            "reason": reason,
            "message": message[:1024],
            "type": type,
            "source": {"component": self._component},
            "reportingComponent": f"lestrade.dev/{self._component}",
            "reportingInstance": self._instance[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self._kube.create(api_path("v1", "events", namespace), body, parse=False)
        except Exception as exc:
            logger.warning("could not post event %s for %s: %s", reason, self._involved["name"], exc)

    @classmethod
    async def drain(cls, timeout: float = 10.0) -> None:
        if cls._tasks:
            await asyncio.wait(list(cls._tasks), timeout=timeout)
