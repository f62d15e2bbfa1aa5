"""Fixtures of the API tests: the real operator and the real API for the test's namespace."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "operator"))

from apikit import Stack, serve, wait_ready  # noqa: E402
from opkit import OperatorThread, model_list, test_registry  # noqa: E402

from lestrade.api.app import create_app  # noqa: E402


@pytest.fixture
def stack(
    cluster: Any, crds: None, namespace: str, model_server: Any, api_client: Any
) -> Iterator[Callable[..., Stack]]:
    """`stack(*scenarios, operator=True, **app_options)`: the operator (models named after the
    scenarios, first = default; the operator tests' tools) and the API serving the namespace."""
    with ExitStack() as stack:

        def start(*scenarios: str, operator: bool = True, **app_options: Any) -> Stack:
            models = model_list(model_server, *scenarios)
            op = None
            if operator:
                op = OperatorThread(cluster, namespace, models, tools=test_registry)
                op.start()
                stack.callback(op.stop)
            client = stack.enter_context(cluster.api_client())
            base = stack.enter_context(serve(create_app(client, namespace=namespace, models=models, **app_options)))
            wait_ready(base)
            return Stack(base, namespace, api_client, op)

        yield start
