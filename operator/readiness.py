"""Ready means ready for work: the operator's health endpoint (Kopf's, `--liveness`: the chart's
probes, `lestrade run`) answers 200 only once the model client is warm (`agent/warmup.py`).

It used to answer as soon as Kopf ran, while litellm's import (about 3 CPU-seconds on an idle
machine; litellm imports its every logging integration, its proxy's types and FastAPI eagerly,
and no setting of litellm skips them) and the warm-up call went on: a pod that said it was ready needed 3 s more for its
first model call, and `lestrade run` printed "Lestrade is running" before a chat could be
answered at full speed (issue #28). Now a rolling update keeps the old pod at work until the new
one can answer, and the newcomer's first chat pays only the model's own time.

The cost is not hidden: it moves before ready, and `bench/restart_bench.py` prints start -> ready
and start -> the first model call beside ready -> the call. Runs never wait for readiness: Kopf
resumes them from its first listing, and they wait for the model client only (`agent/model.py`).
With LESTRADE_WARM_MODEL_CLIENT=false there is no warm-up and no such probe.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

__all__ = ["READY_WAIT", "ModelClientWarming", "model_client_state", "require_warm_model_client"]

READY_WAIT = 1.0
"""Seconds a health request made during the warm-up waits for its end before it is refused: the
200 comes the moment the client is warm (no finer polling needed), and within the chart's probe
timeout (5 s) and `lestrade run`'s (2 s)."""

WARMING = "the model client is still warming up: not ready for work yet"


class ModelClientWarming(kopf.PermanentError):
    """The health request's refusal (a 500) while the model client warms."""


async def model_client_state(warm: asyncio.Future[float], wait: float = READY_WAIT) -> str:
    """What the probe reports once `warm` (the warm-up, its seconds) has ended; raises
    ModelClientWarming if it has not within `wait`. A failed warm-up is ready too: it is only
    logged, and the first model call reports what is wrong (a broken model must not make the
    liveness probe restart the pod)."""
    if not warm.done():
        await asyncio.wait({warm}, timeout=wait)  # neither cancels nor raises
    if not warm.done():
        raise ModelClientWarming(WARMING)
    if warm.cancelled() or warm.exception() is not None:
        return "warm-up failed: the first model call reports why"
    return f"warm in {warm.result():.1f} s"


class _QuietWhileWarming(logging.Filter):
    """Drops what a refused health request logs — Kopf's "failed permanently" line and aiohttp's
    traceback of the 500: a start that is not ready yet is no error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, ModelClientWarming):
                return False
            exc = exc.__cause__ or exc.__context__
        return WARMING not in record.getMessage()


_QUIET = _QuietWhileWarming()


def require_warm_model_client(registry: kopf.OperatorRegistry, warm: asyncio.Future[float]) -> None:
    """Makes the health endpoint of `registry`'s operator wait for `warm` (a Kopf probe)."""

    @kopf.on.probe(registry=registry, id="model_client")
    async def model_client(**_: Any) -> str:
        return await model_client_state(warm)

    for name in ("kopf.activities.probe", "aiohttp.server"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
