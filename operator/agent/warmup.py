"""Warms the model client in the background, so the first model call costs what the next ones do.

A process's first model call used to pay for importing litellm (5 s on an idle machine, 20 s on
a busy one), loading the model's info and token encodings, and litellm's first-call set-up: a
restarted operator resumed its runs 12–19 s after it was ready, and the first chat of
`make run` took 12 s. `warm_up` does all of it right at start, while Kopf connects: the import
in a thread (as `model.load_litellm` always does), then per configured model its context
window, a token count, and one completion with litellm's `mock_response` (the whole client
path, with no request to the provider and no cost). Any failure here is only logged: the real
call reports it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.model import _lib, load_litellm
from lestrade.operator.agent.tokens import context_limits, token_breakdown

__all__ = ["warm_up"]

logger = logging.getLogger(__name__)

_PROBE = [{"role": "user", "content": "warm-up"}]


def _local(settings: Mapping[str, Any]) -> None:
    context_limits(settings, Limits())
    token_breakdown(_PROBE, [], str(settings.get("model", "")))


async def warm_up(models: Iterable[Mapping[str, Any]]) -> float:
    """Seconds it took to make the client ready for `models` (litellm settings)."""
    began = time.perf_counter()
    await load_litellm()
    for settings in models:
        try:
            await asyncio.to_thread(_local, settings)
            kwargs: dict[str, Any] = {"drop_params": True, **settings}
            for owned in ("timeout", "max_retries", "stream"):
                kwargs.pop(owned, None)
            await _lib().acompletion(**kwargs, messages=_PROBE, max_tokens=1, num_retries=0, mock_response="ready")
        except Exception as exc:  # the run's own call reports what is wrong
            logger.debug("warming the model client for %s failed: %s", settings.get("model"), exc)
    elapsed = time.perf_counter() - began
    logger.info("model client ready in %.1f s", elapsed)
    return elapsed
