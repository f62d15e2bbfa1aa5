"""The spend ledger's reads under a burst: the runs that start together share one read of
their namespace's limit (a burst of 200 runs made 200 reads per cache period)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lestrade.operator.base.budgets import SPEND_LIMIT_ANNOTATION, Ledger


class SlowKube:
    """A Kube whose Namespace reads take a moment, counted; `fail` makes the next read fail."""

    def __init__(self) -> None:
        self.gets: list[str] = []
        self.fail = False

    async def get(self, path: str) -> dict[str, Any]:
        self.gets.append(path)
        await asyncio.sleep(0.05)
        if self.fail:
            self.fail = False
            raise RuntimeError("apiserver unavailable")
        return {"metadata": {"annotations": {SPEND_LIMIT_ANNOTATION: "tokens=1000,window=1h"}}}


async def test_concurrent_runs_read_their_namespace_limit_once() -> None:
    kube = SlowKube()
    ledger = Ledger(kube, "lestrade")  # type: ignore[arg-type]
    limits = await asyncio.gather(*(ledger.limit("shop") for _ in range(50)))
    assert kube.gets == ["/api/v1/namespaces/shop"]
    assert {(limit.tokens if limit else None, problem) for limit, problem in limits} == {(1000, None)}
    await ledger.limit("shop")  # cached
    await ledger.limit("other")  # another namespace is its own read
    assert kube.gets == ["/api/v1/namespaces/shop", "/api/v1/namespaces/other"]


async def test_a_failed_read_fails_its_waiters_and_the_next_one_reads_again() -> None:
    kube = SlowKube()
    kube.fail = True
    ledger = Ledger(kube, "lestrade")  # type: ignore[arg-type]
    results = await asyncio.gather(*(ledger.limit("shop") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results) and len(kube.gets) == 1
    limit, _ = await ledger.limit("shop")
    assert limit is not None and limit.tokens == 1000 and len(kube.gets) == 2


async def test_a_waiter_cancelled_does_not_cancel_the_others_read() -> None:
    kube = SlowKube()
    ledger = Ledger(kube, "lestrade")  # type: ignore[arg-type]
    first = asyncio.ensure_future(ledger.limit("shop"))
    second = asyncio.ensure_future(ledger.limit("shop"))
    await asyncio.sleep(0.01)
    first.cancel()
    limit, _ = await second
    assert limit is not None and limit.tokens == 1000 and len(kube.gets) == 1
    with pytest.raises(asyncio.CancelledError):
        await first
