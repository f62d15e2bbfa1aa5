"""What every run of one process shares: API access, settings, models, the tool registry.

The same Engine serves the operator (many runs in one event loop) and a Job's pod (one run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from lestrade.config import ModelList
from lestrade.kube import Kube
from lestrade.operator.base import metrics
from lestrade.operator.base.budgets import Ledger
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.tools.base import ToolRegistry
from lestrade.operator.tools.kubernetes.api import close_connections
from lestrade.operator.tools.mcp.hub import McpHub
from lestrade.resources.tenancy import RunScope

__all__ = ["Engine", "ToolsFactory"]

ToolsFactory = Callable[[k8s.ApiClient], ToolRegistry]


@dataclass
class Engine:
    """What every run shares: API access, settings, models and the tool registry factory."""

    kube: Kube
    api_client: k8s.ApiClient
    settings: OperatorSettings
    models: ModelList
    tools: ToolsFactory
    component: str = "lestrade-operator"
    applied_decisions: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """uid -> decisions already acted upon (from the transcript); used to judge new ones."""
    owns_client: bool = False
    active_runs: int = 0
    """Runs in progress in this process (what the status interval stretches with)."""
    mcp: McpHub = field(default_factory=lambda: McpHub(observe=metrics.mcp_tool_call))
    """The MCPServers this process follows (lestrade.operator.mcpservers) and their tools."""

    @property
    def tenancy(self) -> bool:
        """True when runs are confined to their scope by per-scope identities (the product's
        tools with LESTRADE_SCOPES_NAMESPACE); test registries are not."""
        return bool(getattr(self.tools, "tenancy", False))

    async def tools_for(self, scope: RunScope | None) -> tuple[ToolRegistry, str | None]:
        """The run's registry and the Kubernetes user its tools act as (None: the operator's
        client). Minting an identity blocks (it may create an account), so it runs in a thread."""
        factory: Any = self.tools
        if hasattr(factory, "identity") and hasattr(factory, "registry"):
            identity = await asyncio.to_thread(factory.identity, self.api_client, scope)
            return factory.registry(self.api_client, scope, identity), identity.username if identity else None
        return self.tools(self.api_client), None

    def status_interval(self) -> float:
        """Seconds between progress patches of one run: the configured interval, longer when
        so many runs are active that together they would exceed the patch budget."""
        budget = self.settings.status.patches_per_second
        return max(self.settings.status.interval, self.active_runs / budget)

    _ledger: Ledger | None = None

    @property
    def ledger(self) -> Ledger:
        """The namespaces' spend (budgets.py), made on first use."""
        if self._ledger is None:
            self._ledger = Ledger(self.kube, self.settings.spend.ledger_namespace, self.settings.spend.namespace_limit)
        return self._ledger

    async def aclose(self) -> None:
        await self.kube.aclose()
        await close_connections()  # the tools' (one pool per tools identity)
        if self.owns_client:
            self.api_client.close()
