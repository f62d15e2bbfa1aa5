"""`default_registry`: the toolsets a run gets, assembled from configuration.

Build one registry per run: the TodoWrite plan lives in it. Read-only Kubernetes, bash,
runbooks, TodoWrite and past findings (`search_findings`) are on by default; Prometheus and
Alertmanager need a URL (a run scoped to namespaces gets them confined to its namespaces); write tools need an explicit
opt-in and even then every call waits for approval.

Identities: `api_client` and `kubeconfig` are the tools' read-only identity (the Kubernetes and
runbook tools use the client, bash's kubectl the kubeconfig); only the write tools, which never
run without a person's approval, use `write_api_client`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kubernetes.client import ApiClient

from lestrade.operator.tools.alerting import alerting_toolset
from lestrade.operator.tools.base import ToolRegistry
from lestrade.operator.tools.bash.tool import bash_toolset
from lestrade.operator.tools.findings import findings_toolset
from lestrade.operator.tools.kubernetes.toolset import kubernetes_toolset
from lestrade.operator.tools.prometheus import prometheus_toolset
from lestrade.operator.tools.promql_scope import NamespaceScope
from lestrade.operator.tools.runbooks import runbooks_toolset
from lestrade.operator.tools.todo import todo_toolset
from lestrade.operator.tools.write import write_toolset

__all__ = ["default_registry", "DEFERRED"]

DEFERRED = frozenset({"todo", "findings", "prometheus", "alerting", "bash"})
"""The built-in toolsets offered only once the model opens them (`tools.base`): every offered
schema and its instructions are resent on every model call, and most investigations of a pod
or a workload need none of a task list, past findings, PromQL, alert rules or a command line
(bash's own advice is to prefer the kubectl_* tools; its rules are 200 tokens a call). Opening
one costs a model call the run that needs it makes anyway. The Kubernetes tools and the
runbooks stay offered from the start: nearly every investigation uses the first, and a
matching runbook should be read before anything else."""


def default_registry(
    api_client: ApiClient,
    *,
    write_api_client: ApiClient | None = None,
    kubeconfig: str | Path | None = None,
    tool_workdir: str | None = None,
    prometheus_url: str | None = None,
    alertmanager_url: str | None = None,
    metrics_namespace_label: str = "namespace",
    runbook_dirs: list[str | Path] | None = None,
    runbook_namespaces: list[str] | None = None,
    runbook_api_client: ApiClient | None = None,
    write_namespaces: list[str] | None = None,
    scope_namespaces: list[str] | None = None,
    enable_write_tools: bool = False,
    enable_bash: bool = True,
    bash_env: Mapping[str, str] | None = None,
) -> ToolRegistry:
    """All built-in toolsets for one run. `bash_env` adds variables to bash's minimal env;
    `runbook_namespaces` are the only namespaces whose labelled ConfigMaps are runbooks;
    `tool_workdir` is the private folder bash's children work (and may write) in;
    `runbook_api_client` reads the runbook ConfigMaps (the admin's, so not the run's scoped
    identity); `write_namespaces` confines the write tools to the run's scope;
    `scope_namespaces` makes the Kubernetes tools' cross-namespace lists cover the scope, and
    confines Prometheus and Alertmanager to series and alerts whose `metrics_namespace_label`
    is one of them."""
    toolsets = [
        kubernetes_toolset(api_client, namespaces=scope_namespaces),
        runbooks_toolset(
            runbook_dirs, api_client=runbook_api_client or api_client, configmap_namespaces=runbook_namespaces
        ),
        todo_toolset(),
        findings_toolset(api_client, namespaces=scope_namespaces),
    ]
    metrics_scope = NamespaceScope(tuple(scope_namespaces), metrics_namespace_label) if scope_namespaces else None
    if prometheus_url:
        toolsets.append(prometheus_toolset(prometheus_url, scope=metrics_scope))
    if prometheus_url or alertmanager_url:
        toolsets.append(alerting_toolset(prometheus_url, alertmanager_url, scope=metrics_scope))
    bash = bash_toolset(env=bash_env, kubeconfig=kubeconfig, cwd=tool_workdir, api_client=api_client)
    bash.enabled = enable_bash
    toolsets.append(bash)
    for toolset in toolsets:
        toolset.deferred = toolset.name in DEFERRED
    toolsets.append(
        write_toolset(write_api_client or api_client, enabled=enable_write_tools, namespaces=write_namespaces)
    )
    return ToolRegistry(toolsets=toolsets)
