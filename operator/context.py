"""Builds the shared `Engine` of a process (operator or Job pod) from its settings.

Kept apart from the runner so that tests and the benchmark can build an engine around their
own ApiClient and tool registry, and so the Job entrypoint does not import Kopf.
"""

from __future__ import annotations

from kubernetes import client as k8s

from lestrade.config import ModelList
from lestrade.operator.tools import ToolRegistry, default_registry

from .kube import Kube, make_api_client
from .runner import Engine, ToolsFactory
from .settings import OperatorSettings

__all__ = ["build_engine", "default_tools"]


def default_tools(settings: OperatorSettings) -> ToolsFactory:
    """The product's tool registry, configured by the settings (one registry per run)."""

    def factory(api_client: k8s.ApiClient) -> ToolRegistry:
        return default_registry(
            api_client,
            prometheus_url=settings.prometheus_url,
            runbook_dirs=list(settings.runbook_dirs) or None,
            enable_write_tools=settings.enable_write_tools,
            enable_bash=settings.enable_bash,
        )

    return factory


def build_engine(
    settings: OperatorSettings,
    models: ModelList,
    kubeconfig: str | None = None,
    *,
    api_client: k8s.ApiClient | None = None,
    tools: ToolsFactory | None = None,
    component: str = "lestrade-operator",
) -> Engine:
    """An Engine on `api_client`, or on a new client from the kubeconfig / in-cluster config."""
    owned = api_client is None
    client = api_client or make_api_client(kubeconfig)
    engine = Engine(
        kube=Kube(client),
        api_client=client,
        settings=settings,
        models=models,
        tools=tools or default_tools(settings),
        component=component,
        owns_client=owned,
    )
    return engine
