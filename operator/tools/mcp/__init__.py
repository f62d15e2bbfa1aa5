"""Tools of remote MCP servers (MCPServer resources), seen by the model as `<server>__<tool>`.

`client` talks to a server with the official SDK, one short session per operation (no shared
session state to go stale; a restarted server works on the next call), within a deadline, with
a byte cap on answers, and with undecodable answers detected at once instead of waited out;
errors never quote what a non-MCP service answered. `catalog` turns a hostile listing into the
offered tools and the skipped ones with reasons (names, lengths, schemas, filters, approval
policy). `toolset` makes each offered tool a `FunctionTool` (arguments checked against its
schema without the schema's regexes; outputs redacted, capped and counted like every tool's).
`hub` is the process's registry of servers and builds a run's toolsets.
"""

from lestrade.operator.tools.mcp.catalog import McpToolInfo, Policy, Skipped, build_catalog
from lestrade.operator.tools.mcp.client import Discovery, McpFailure, ServerConfig, call_tool, discover
from lestrade.operator.tools.mcp.hub import McpHub, McpServerEntry

__all__ = [
    "McpToolInfo",
    "Policy",
    "Skipped",
    "build_catalog",
    "Discovery",
    "McpFailure",
    "ServerConfig",
    "call_tool",
    "discover",
    "McpHub",
    "McpServerEntry",
]
