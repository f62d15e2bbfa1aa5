"""litellm is imported once, in one thread, however many runs ask for it at the same moment."""

from __future__ import annotations

import asyncio
import threading

import pytest

from lestrade.operator.agent import model as model_mod


async def test_a_burst_of_first_calls_shares_one_import(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded, release, calls = threading.Event(), threading.Event(), []

    def slow_import() -> None:
        calls.append(threading.current_thread().name)
        release.wait(30)
        loaded.set()

    monkeypatch.setattr(model_mod, "_loaded", loaded)
    monkeypatch.setattr(model_mod, "_import", slow_import)
    waiters = [asyncio.create_task(model_mod.load_litellm()) for _ in range(50)]
    # Every waiter is parked on the one import; the default executor has room for other work.
    other = await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 30)
    assert other == "free"
    release.set()
    await asyncio.wait_for(asyncio.gather(*waiters), 30)
    assert len(calls) == 1
    await model_mod.load_litellm()  # loaded: no thread at all
    assert len(calls) == 1
