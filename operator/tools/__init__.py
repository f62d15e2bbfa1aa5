"""Lestrade's built-in tools: Kubernetes (read-only), Prometheus, bash, runbooks, TodoWrite and
opt-in write actions, behind the `Tool`/`Toolset`/`ToolRegistry` contract in `base`.

Every built-in tool redacts credential-looking values from its output (`redact`); tools from
elsewhere should be passed through `redact` by their caller too.
"""

from lestrade.operator.tools.base import Tool, ToolOutput, ToolRegistry, Toolset, ToolStatus
from lestrade.operator.tools.bash.tool import bash_toolset
from lestrade.operator.tools.kubernetes.toolset import kubernetes_toolset
from lestrade.operator.tools.prometheus import prometheus_toolset
from lestrade.operator.tools.redact import redact
from lestrade.operator.tools.registry import default_registry
from lestrade.operator.tools.runbooks import runbooks_toolset
from lestrade.operator.tools.todo import todo_toolset
from lestrade.operator.tools.write import write_toolset

__all__ = [
    "Tool",
    "ToolOutput",
    "ToolRegistry",
    "ToolStatus",
    "Toolset",
    "bash_toolset",
    "default_registry",
    "kubernetes_toolset",
    "prometheus_toolset",
    "redact",
    "runbooks_toolset",
    "todo_toolset",
    "write_toolset",
]
