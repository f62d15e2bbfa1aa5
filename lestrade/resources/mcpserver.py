"""The MCPServer resource: a remote MCP tool server whose tools the runs of its namespace use.

The operator (`lestrade.operator.mcpservers`) connects to `spec.url`, lists the server's tools
and reports them in status with the `Ready` condition; a run in the same namespace (and in
namespaces the cluster admin shares the server with, `mcpServers` in the scope policy) sees
each tool as `<server>__<tool>`. Everything the server says is treated as hostile input; the
headers (credentials) come from a Secret that only the operator reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from lestrade.resources.common import DURATION_PATTERN, Condition, WireModel, cel_rule
from lestrade.resources.constants import API_VERSION, MCPSERVER_KIND
from lestrade.resources.keys import MCP_CREDENTIALS_LABEL

__all__ = [
    "MCP_CREDENTIALS_LABEL",
    "MAX_SERVER_NAME",
    "SecretKeyRef",
    "McpHeader",
    "McpTimeouts",
    "McpToolFilter",
    "McpApprovalRule",
    "MCPServerSpec",
    "DiscoveredTool",
    "SkippedTool",
    "MCPServerStatus",
    "MCPServer",
    "server_name_rule",
]

"""A Secret the operator reads for an MCPServer's headers must carry this label with value
"true": otherwise anyone who may create an MCPServer could make the operator send any Secret of
the namespace to a URL of their choice."""

MAX_SERVER_NAME = 30
"""`<server>__<tool>` must fit a model's 64-character function names with room for the tool."""

_GLOB = r"^[A-Za-z0-9_.*?\[\]!/-]{1,128}$"


class SecretKeyRef(WireModel):
    """One key of a Secret in the MCPServer's namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description=f"Name of the Secret (same namespace). It must carry the label {MCP_CREDENTIALS_LABEL}=true.",
    )
    key: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key in the Secret's data whose value is the header's value.",
    )


class McpHeader(WireModel):
    """An HTTP header sent with every request to the server, its value taken from a Secret."""

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$",
        description="Header name, e.g. Authorization.",
    )
    secret_key_ref: SecretKeyRef = Field(
        description="Where the value is; read by the operator only, never shown in status, Events or to the model."
    )


class McpTimeouts(WireModel):
    """How long the operator waits for the server."""

    connect: str = Field(
        default="10s",
        pattern=DURATION_PATTERN,
        max_length=32,
        description="Connecting and listing the tools, e.g. 10s.",
    )
    call: str = Field(
        default="30s",
        pattern=DURATION_PATTERN,
        max_length=32,
        description="One tool call, e.g. 30s; past it the model gets a tool error.",
    )


class McpToolFilter(WireModel):
    """Which of the server's tools are offered (shell-style globs on the server's tool names)."""

    include: list[str] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"items": {"type": "string", "pattern": _GLOB}},
        description="Only tools matching one of these (empty: all).",
    )
    exclude: list[str] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"items": {"type": "string", "pattern": _GLOB}},
        description="Never tools matching one of these (wins over include).",
    )


class McpApprovalRule(WireModel):
    """The approval policy of some tools; the first rule whose globs match a tool applies."""

    tools: list[str] = Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"items": {"type": "string", "pattern": _GLOB}},
        description="Globs on the server's tool names.",
    )
    approval: Literal["Required", "Unattended"] = Field(
        description="Required: every call waits for a person. Unattended: calls run without "
        "approval, except tools the server marks destructive (destructiveHint), which always wait."
    )


class MCPServerSpec(WireModel):
    """Where the server is and how its tools may be used."""

    url: str = Field(
        min_length=8,
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
        description="The server's endpoint, e.g. http://mcp.tools.svc:8000/mcp "
        "(streamable HTTP) or http://host:8000/sse (SSE).",
    )
    transport: Literal["StreamableHTTP", "SSE"] = Field(
        default="StreamableHTTP", description="MCP transport: StreamableHTTP (default) or SSE."
    )
    headers: list[McpHeader] = Field(
        default_factory=list, max_length=16, description="Headers from Secrets, e.g. Authorization."
    )
    timeouts: McpTimeouts = Field(default_factory=McpTimeouts, description="Connect and call timeouts.")
    tools: McpToolFilter = Field(default_factory=McpToolFilter, description="Tool name filters.")
    trust_hints: bool = Field(
        default=False,
        description="true: a tool the server marks readOnlyHint (and not destructiveHint) runs "
        "without approval. false (default): the server's hints are not believed and every call "
        "waits for approval unless spec.approval says Unattended.",
    )
    approval: list[McpApprovalRule] = Field(
        default_factory=list,
        max_length=64,
        description="Per-tool approval policy, first match wins; tools matching no rule follow "
        "the hints (see trustHints).",
    )
    max_output_chars: int = Field(
        default=30_000, ge=1_000, le=200_000, description="A tool's output is cut to this many characters."
    )


class DiscoveredTool(WireModel):
    """A tool the server offers, as the runs see it."""

    name: str = Field(max_length=64, description="What the model calls: <server>__<tool>.")
    tool: str = Field(max_length=64, description="The server's name for it.")
    description: str = Field(default="", max_length=256, description="Its description (shortened).")
    read_only: bool | None = Field(default=None, description="The server's readOnlyHint.")
    destructive: bool | None = Field(default=None, description="The server's destructiveHint.")
    approval: Literal["Required", "Unattended"] = Field(description="Whether its calls wait for a person.")


class SkippedTool(WireModel):
    """A tool of the server that is not offered, and why."""

    tool: str = Field(max_length=80, description="The server's name for it (shortened).")
    reason: str = Field(max_length=256, description="Why it is not offered.")


class MCPServerStatus(WireModel):
    """What the operator found at the server. Written only by the operator."""

    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready: connected and the tools listed (False names the problem).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    tools: list[DiscoveredTool] = Field(default_factory=list, max_length=256, description="The tools offered to runs.")
    tool_count: int | None = Field(default=None, ge=0, description="How many tools are offered.")
    skipped_tools: list[SkippedTool] = Field(
        default_factory=list, max_length=64, description="Tools not offered (filters, bad names or schemas)."
    )
    server: str | None = Field(
        default=None, max_length=128, description="The name and version the server gave (its own claim)."
    )
    last_error: str | None = Field(default=None, max_length=1024, description="The latest failure.")
    last_connected: datetime | None = Field(default=None, description="When the tools were last listed.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this status reflects."
    )


class MCPServer(WireModel):
    api_version: Literal["lestrade.dev/v1alpha1"] = Field(default=API_VERSION)
    kind: Literal["MCPServer"] = Field(default=MCPSERVER_KIND)
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: MCPServerSpec
    status: MCPServerStatus = Field(default_factory=MCPServerStatus)


def server_name_rule() -> dict[str, Any]:
    return cel_rule(
        f"self.metadata.name.size() <= {MAX_SERVER_NAME} && "
        "self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        f"metadata.name: at most {MAX_SERVER_NAME} characters, lowercase letters, digits and '-' "
        "(the model calls its tools <name>__<tool>)",
    )
