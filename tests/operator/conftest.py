"""Fixtures of the operator tests: an in-process operator per test, bound to its namespace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opkit import OperatorProcess, OperatorThread, model_list, test_registry

from lestrade.config import ModelList


@pytest.fixture(autouse=True)
def _no_operator_process_outlives_its_test() -> Iterator[None]:
    yield
    OperatorProcess.kill_leftovers()


@pytest.fixture
def start_operator(
    cluster: Any, crds: None, namespace: str, model_server: Any
) -> Iterator[Callable[..., OperatorThread]]:
    """`start_operator(*scenarios, models=None, tools=test_registry, **settings)`: an operator
    watching the test's namespace. Its models are the named scenarios of the session's model
    server (first = default) unless `models` is given; `tools=None` means the product's own
    default registry."""
    started: list[OperatorThread] = []

    def start(
        *scenarios: str, models: ModelList | None = None, tools: Any = test_registry, **settings: Any
    ) -> OperatorThread:
        op = OperatorThread(cluster, namespace, models or model_list(model_server, *scenarios), tools=tools, **settings)
        started.append(op)
        return op.start()

    yield start
    # Every operator is stopped, and a crash of any (its thread ended early or raised) fails the
    # test here even when the test itself did not notice.
    failures = []
    for op in started:
        try:
            op.stop()
        except Exception as exc:
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise ExceptionGroup("operators failed during the test", failures)
