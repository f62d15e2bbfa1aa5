"""Fixtures of the agent tests: a way to build agents that play a scenario on the session's
scripted model server (`model_server`, from `lestrade.testing.model_fixtures`).

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
def harness(model_server: ScriptedModelServer, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A harness with a scenario name of its own; afterwards checks that every request the
    test made (summary calls included) carried `max_tokens`."""
    safe = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:40]
    harness = Harness(model_server, f"agent-{next(_names)}-{safe}")
    yield harness
    missing = [r for r in harness.requests() if not isinstance(r.get("max_tokens"), int)]
    assert not missing, f"{len(missing)} model request(s) without max_tokens"
