"""Builds the shared `Engine` of a process (operator or Job pod) from its settings.

Kept apart from the attempt so that tests and the benchmark can build an engine around their
own ApiClient and tool registry, and so the Job entrypoint does not import Kopf.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import aiohttp
from kubernetes import client as k8s

from lestrade.config import ModelList
from lestrade.kube import Kube, make_api_client
from lestrade.operator.base.engine import Engine, ToolsFactory
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.tenancy.scope_identity import ScopeIdentities
from lestrade.operator.tenancy.tools_identity import ToolsIdentity, parse_service_account
from lestrade.operator.tools import ToolRegistry, default_registry
from lestrade.resources.tenancy import RunScope

__all__ = ["build_engine", "default_tools", "ScopedTools"]

logger = logging.getLogger(__name__)


class ScopedTools:
    """The product's tool registry for one run, acting as the identity of the run's scope.

    With `tools_service_account`, cluster-wide runs act as that read-only account; with
    `scopes_namespace` too, every other run acts as an account bound to its scope's namespaces
    only (`tenancy/scope_identity.py`). Identities are minted with the operator's client once per
    process and renewed as they age; only the write tools, which always wait for approval, act
    with the operator's own client.

    `identity` is called from worker threads (minting blocks), by many runs at once after a
    restart: the lock makes the first caller create each identity and the others wait for it
    (without it, every thread minted its own token and folder, and all but one leaked).
    """

    def __init__(self, settings: OperatorSettings) -> None:
        self.settings = settings
        self._cluster: ToolsIdentity | None = None
        self._scoped: ScopeIdentities | None = None
        self._warned = False
        self._lock = threading.Lock()

    @property
    def tenancy(self) -> bool:
        """True when runs are confined to their scope (else every run reads cluster-wide)."""
        return bool(self.settings.tenancy.scopes_namespace)

    def _cluster_identity(self, operator_client: k8s.ApiClient) -> ToolsIdentity | None:
        with self._lock:
            return self._make_cluster_identity(operator_client)

    def _make_cluster_identity(self, operator_client: k8s.ApiClient) -> ToolsIdentity | None:
        if self._cluster is None and self.settings.tenancy.tools_service_account:
            namespace, name = parse_service_account(self.settings.tenancy.tools_service_account, "default")
            self._cluster = ToolsIdentity(operator_client, namespace, name)
        elif self._cluster is None and not self._warned:
            self._warned = True
            logger.warning(
                "LESTRADE_TOOLS_SERVICE_ACCOUNT is not set: the Kubernetes tools act with the "
                "operator's own credentials and bash's kubectl gets none"
            )
        return self._cluster

    def identity(self, operator_client: k8s.ApiClient, scope: RunScope | None) -> ToolsIdentity | None:
        """The identity for `scope` (blocking: may create an account and mint a token)."""
        cluster = self._cluster_identity(operator_client)
        if scope is None or scope.cluster or not self.settings.tenancy.scopes_namespace:
            if cluster is not None:
                cluster.refresh()  # each run starts with a token good for half its lifetime
            return cluster
        return self._scopes(operator_client, cluster).for_scope(scope)

    def _scopes(self, operator_client: k8s.ApiClient, cluster: ToolsIdentity | None) -> ScopeIdentities:
        assert self.settings.tenancy.scopes_namespace
        with self._lock:
            if self._scoped is None:
                self._scoped = ScopeIdentities(
                    operator_client,
                    self.settings.tenancy.scopes_namespace,
                    self.settings.tenancy.tools_read_role,
                    cluster,
                    idle=self.settings.tenancy.scope_identity_idle,
                )
            return self._scoped

    def collect_unused(self, operator_client: k8s.ApiClient) -> list[str]:
        """Deletes the per-scope accounts no run used for `scope_identity_idle` (blocking)."""
        if not self.settings.tenancy.scopes_namespace:
            return []
        return self._scopes(operator_client, self._cluster_identity(operator_client)).collect_unused()

    def close(self) -> None:
        """Removes the identities' folders and closes their clients (also done at exit)."""
        with self._lock:
            if self._scoped is not None:
                self._scoped.close()
            if self._cluster is not None:
                self._cluster.close()

    def registry(self, api_client: k8s.ApiClient, scope: RunScope | None, tools: ToolsIdentity | None) -> ToolRegistry:
        settings = self.settings
        cluster_wide = scope is None or scope.cluster
        runbook_client = self._cluster.api_client if self._cluster else api_client
        return default_registry(
            tools.api_client if tools else api_client,
            write_api_client=api_client,
            kubeconfig=tools.kubeconfig if tools else None,
            tool_workdir=str(tools.workdir) if tools else None,
            # Prometheus and Alertmanager have no authorization of their own: a scoped run's
            # queries and alerts are confined to its namespaces by the tools (promql_scope.py).
            prometheus_url=settings.tools.prometheus_url,
            alertmanager_url=settings.tools.alertmanager_url,
            metrics_namespace_label=settings.tools.prometheus_namespace_label,
            runbook_dirs=list(settings.tools.runbook_dirs) or None,
            # Runbooks are the admin's (configured namespaces), read as the cluster-wide account.
            runbook_api_client=runbook_client,
            runbook_namespaces=list(settings.tools.runbook_namespaces),
            enable_write_tools=settings.tools.write_tools,
            enable_bash=settings.tools.bash,
            write_namespaces=None if cluster_wide else list(scope.namespaces),  # type: ignore[union-attr]
            scope_namespaces=None if cluster_wide else list(scope.namespaces),  # type: ignore[union-attr]
        )

    def __call__(self, api_client: k8s.ApiClient, scope: RunScope | None = None) -> ToolRegistry:
        return self.registry(api_client, scope, self.identity(api_client, scope))


def default_tools(settings: OperatorSettings) -> ScopedTools:
    """The product's tool registry factory, configured by the settings (one registry per run)."""
    return ScopedTools(settings)


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
