"""Builds the shared `Engine` of a process (operator or Job pod) from its settings.

Kept apart from the attempt so that tests and the benchmark can build an engine around their
own ApiClient and tool registry, and so the Job entrypoint does not import Kopf.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp
from kubernetes import client as k8s

from lestrade.config import ModelList
from lestrade.operator.tools import ToolRegistry, default_registry

from lestrade.kube import Kube, make_api_client
from .engine import Engine, ToolsFactory
from .settings import OperatorSettings
from .tools_identity import ToolsIdentity, parse_service_account

__all__ = ["build_engine", "default_tools"]

logger = logging.getLogger(__name__)


def default_tools(settings: OperatorSettings) -> ToolsFactory:
    """The product's tool registry, configured by the settings (one registry per run).

    With `tools_service_account`, the tools act as that read-only account (minted once per
    process with the operator's client, renewed as it ages); only the write tools, which
    always wait for approval, act with the operator's own client.
    """
    identity: ToolsIdentity | None = None
    warned = False

    def tools_identity(operator_client: k8s.ApiClient) -> ToolsIdentity | None:
        nonlocal identity, warned
        if identity is None and settings.tools_service_account:
            namespace, name = parse_service_account(settings.tools_service_account, "default")
            identity = ToolsIdentity(operator_client, namespace, name)
        elif identity is None and not warned:
            warned = True
            logger.warning(
                "LESTRADE_TOOLS_SERVICE_ACCOUNT is not set: the Kubernetes tools act with the "
                "operator's own credentials and bash's kubectl gets none"
            )
        if identity is not None:
            identity.refresh()  # each run starts with a token good for half its lifetime
        return identity

    def factory(api_client: k8s.ApiClient) -> ToolRegistry:
        tools = tools_identity(api_client)
        return default_registry(
            tools.api_client if tools else api_client,
            write_api_client=api_client,
            kubeconfig=tools.kubeconfig if tools else None,
            tool_workdir=str(tools.workdir) if tools else None,
            prometheus_url=settings.prometheus_url,
            runbook_dirs=list(settings.runbook_dirs) or None,
            runbook_namespaces=list(settings.runbook_namespaces),
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
    session_factory: Callable[..., aiohttp.ClientSession] = aiohttp.ClientSession,
) -> Engine:
    """An Engine on `api_client`, or on a new client from the kubeconfig / in-cluster config.
    `session_factory` is `lestrade.kube.Kube`'s transport seam (tests observe or slow requests)."""
    owned = api_client is None
    client = api_client or make_api_client(kubeconfig)
    engine = Engine(
        kube=Kube(client, session_factory=session_factory),
        api_client=client,
        settings=settings,
        models=models,
        tools=tools or default_tools(settings),
        component=component,
        owns_client=owned,
    )
    return engine
