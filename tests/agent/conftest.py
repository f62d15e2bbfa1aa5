"""Fixtures of the agent tests: the scripted model server and a way to build and drive agents.

Every test adds its own uniquely named scenario, so tests share one server without sharing
fault counters or request logs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

import lestrade  # noqa: F401  (offline litellm/tiktoken before anything imports them)
from lestrade.config import ModelConfig
from lestrade.modelserver import Scenario, ScriptedModelServer
from lestrade.operator.agent import Agent, Limits, PromptConfig
from lestrade.operator.tools.base import ToolRegistry

_names = itertools.count()


@pytest.fixture(scope="session")
def scripted(request: pytest.FixtureRequest) -> Iterator[ScriptedModelServer]:
    """The shared `model_server` fixture when the plugin provides it, else our own server."""
    try:
        yield request.getfixturevalue("model_server")
        return
    except pytest.FixtureLookupError:
        pass
    server = ScriptedModelServer(latency_ms=0).start()
    yield server
    server.stop()


class Harness:
    """Builds agents that play a scenario on the scripted server, and collects their events."""

    def __init__(self, server: ScriptedModelServer, name: str) -> None:
        self.server = server
        self.name = name

    def scenario(self, **fields: Any) -> Scenario:
        return self.server.add_scenario(Scenario(name=self.name, **fields))

    def agent(
        self,
        tools: ToolRegistry,
        prompt: PromptConfig | None = None,
        *,
        approvals: bool = True,
        settings: dict[str, Any] | None = None,
        **limits: Any,
    ) -> Agent:
        model = ModelConfig(self.name, {**self.server.litellm_params(self.name), **(settings or {})})
        return Agent(model, tools, prompt, Limits(**limits), enable_tool_approval=approvals)

    def requests(self) -> list[dict[str, Any]]:
        return self.server.requests(self.name)


@pytest.fixture
def harness(scripted: ScriptedModelServer, request: pytest.FixtureRequest) -> Harness:
    safe = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:40]
    return Harness(scripted, f"agent-{next(_names)}-{safe}")
