"""`default_registry`: the toolsets a run gets, assembled from configuration.

Build one registry per run: the TodoWrite plan lives in it. Read-only Kubernetes, bash,
runbooks and TodoWrite are on by default; Prometheus needs a URL; write tools need an explicit
opt-in and even then every call waits for approval.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kubernetes.client import ApiClient

from lestrade.operator.tools.base import ToolRegistry
from lestrade.operator.tools.bash import bash_toolset
from lestrade.operator.tools.kubernetes import kubernetes_toolset
from lestrade.operator.tools.prometheus import prometheus_toolset
from lestrade.operator.tools.runbooks import runbooks_toolset
from lestrade.operator.tools.todo import todo_toolset
from lestrade.operator.tools.write import write_toolset

__all__ = ["default_registry"]


def default_registry(
    api_client: ApiClient,
    *,
    prometheus_url: str | None = None,
    runbook_dirs: list[str | Path] | None = None,
    enable_write_tools: bool = False,
    enable_bash: bool = True,
    bash_env: Mapping[str, str] | None = None,
) -> ToolRegistry:
    """All built-in toolsets for one run. `bash_env` adds variables (e.g. KUBECONFIG) to bash's minimal env."""
    toolsets = [
        kubernetes_toolset(api_client),
        runbooks_toolset(runbook_dirs, api_client=api_client),
        todo_toolset(),
    ]
    if prometheus_url:
        toolsets.append(prometheus_toolset(prometheus_url))
    bash = bash_toolset(env=bash_env)
    bash.enabled = enable_bash
    toolsets.append(bash)
    toolsets.append(write_toolset(api_client, enabled=enable_write_tools))
    return ToolRegistry(toolsets=toolsets)
