"""Fixtures for the scripted model server (see lestrade.modelserver).

One server serves the whole test session (starting it is cheap, but one port and one request
log keep tests simple); scenarios are stateless and chosen by name, so tests only need unique
scenario names to stay independent of each other.

Fixtures:
- `model_server`: the session's `ScriptedModelServer` (demo scenario included).
- `scenario_name`: a scenario name unique to the current test, e.g. `test-crash-loop-3f9a1c`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from lestrade.modelserver import ScriptedModelServer

__all__ = ["model_server", "scenario_name"]


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(latency_ms=0) as server:
        yield server


@pytest.fixture
def scenario_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40]
    return f"{base}-{uuid.uuid4().hex[:6]}"
