"""The operator imports what it needs when it needs it (issue #11: cold start <= 2 s, RSS idle
<= 150 MiB; the figures are in bench/burst_bench.py, never in a test), and says it is ready once
it can answer at full speed (issue #28: its model client warm; bench/restart_bench.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from opkit import wait_until

import lestrade.operator.__main__ as operator_main
from lestrade.localcluster.cluster import free_port
from lestrade.operator.readiness import ModelClientWarming, model_client_state

LATE = ("litellm", "httpx", "bashlex", "jinja2", "rich")
"""Imported at the first model call, Prometheus query, bash command or alert template."""


def test_starting_the_operator_imports_no_model_client_nor_tool_parsers() -> None:
    probe = (
        "import json, sys, lestrade.operator.__main__; "
        f"print(json.dumps(sorted(m for m in {list(LATE)!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_early_model_client_import_pauses_the_garbage_collector_only_while_it_runs() -> None:
    """`python -m lestrade.operator` starts litellm's import first thing, with Python's cyclic
    collector paused (a fifth of the import's CPU); once it ends, the start's objects are frozen
    and the collector runs again: never left paused, which would grow the operator for ever."""
    probe = (
        "import gc, sys, lestrade.operator.__main__ as m; thread = m.start_model_client_import(); "
        "paused = not gc.isenabled(); thread.join(); "
        "print(paused, gc.isenabled(), gc.get_freeze_count() > 0, 'litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=300)
    assert out.stdout.split()[-4:] == ["True", "True", "True", "True"]


def _health(url: str) -> tuple[int, Any] | None:
    """(status, body) of the operator's health endpoint; None while it does not serve yet."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as refused:
        return refused.code, None
    except OSError:
        return None


def test_the_operator_is_ready_only_once_its_model_client_is_warm_and_says_so_without_errors(
    start_operator: Callable[..., Any],
    scenario_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kopf runs and serves its health endpoint, but the warm-up (here held by the test, where
    litellm's import and the warm-up call take seconds) has not ended: the endpoint refuses, so
    the chart's readiness probe and `lestrade run` wait. Once warm: 200, saying so. A refusal
    during a normal start is logged as no error (no traceback, no "failed permanently")."""
    warm = threading.Event()

    async def held_warm_up(models: Any) -> float:
        await asyncio.to_thread(warm.wait, 120)
        return 2.5

    monkeypatch.setattr(operator_main, "warm_up", held_warm_up)
    url = f"http://127.0.0.1:{free_port()}/healthz"
    caplog.set_level(logging.DEBUG)
    try:
        start_operator(scenario_name, process_liveness=url, runs_warm_model_client=True)
        served = wait_until("Kopf's health endpoint serving", lambda: _health(url), timeout=60)
        assert served == (500, None)
        assert _health(url) == (500, None)  # and keeps refusing while the client warms
    finally:
        warm.set()
    wait_until("the operator ready", lambda: (_health(url) or (0,))[0] == 200, timeout=60)
    assert _health(url) == (200, {"model_client": "warm in 2.5 s"})
    # What a refused request would log: Kopf's probe failure and aiohttp's traceback of the 500.
    noisy = [
        r
        for r in caplog.records
        if r.name in ("kopf.activities.probe", "aiohttp.server") and r.levelno >= logging.WARNING
    ]
    assert noisy == [], [r.getMessage() for r in noisy]


async def test_a_failed_warm_up_is_ready_too_and_a_pending_one_is_refused_after_the_wait() -> None:
    """A warm-up that failed is only logged (the first model call reports why): the probe
    passes, or a broken model list would make the liveness probe restart the pod for ever."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[float] = loop.create_future()
    with pytest.raises(ModelClientWarming):
        await model_client_state(pending, wait=0.01)
    pending.set_exception(RuntimeError("no such model"))
    assert await model_client_state(pending) == "warm-up failed: the first model call reports why"
    done: asyncio.Future[float] = loop.create_future()
    loop.call_soon(done.set_result, 3.14)
    assert await model_client_state(done, wait=60) == "warm in 3.1 s"  # answered as it ends
