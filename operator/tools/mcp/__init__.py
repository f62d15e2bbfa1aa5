"""Tools of remote MCP servers (MCPServer resources): client, catalog of hostile listings,
the model-facing tools and the process's hub of known servers."""

from lestrade.operator.tools.mcp.catalog import McpToolInfo, Policy, Skipped, build_catalog
from lestrade.operator.tools.mcp.client import Discovery, McpFailure, ServerConfig, call_tool, discover
from lestrade.operator.tools.mcp.hub import McpHub, McpServerEntry

__all__ = [
    "McpToolInfo", "Policy", "Skipped", "build_catalog",
    "Discovery", "McpFailure", "ServerConfig", "call_tool", "discover",
    "McpHub", "McpServerEntry",
]
