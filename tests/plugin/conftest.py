"""Fixtures of the plugin tests: the real operator for the test's namespace (the plugin itself
runs as a subprocess, see pluginkit.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "operator"))

from opkit import OperatorThread, model_list  # noqa: E402


@pytest.fixture
def operator(cluster: Any, crds: None, namespace: str, model_server: Any) -> Iterator[Callable[..., OperatorThread]]:
    started: list[OperatorThread] = []

    def start(*scenarios: str) -> OperatorThread:
        op = OperatorThread(cluster, namespace, model_list(model_server, *scenarios))
        started.append(op)
        return op.start()

    yield start
    for op in started:
        op.stop()
