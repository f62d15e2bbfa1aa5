"""What a server's tool listing becomes: the tools a run may call, and those refused, with why.

The listing is hostile input. A tool is offered only when its name is plain (`[A-Za-z0-9_-]`,
so `<server>__<tool>` is a valid function name of at most 64 characters), its description is
cut to `MAX_DESCRIPTION` characters without control characters, and its input schema is a
JSON-schema object of at most `MAX_SCHEMA_BYTES` that a validator accepts. At most `MAX_TOOLS`
tools per server; duplicates after the first are dropped. The spec's filters and approval
policy are applied here too, so status shows exactly what runs see.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "McpToolInfo",
    "Skipped",
    "Policy",
    "build_catalog",
    "clean_text",
    "exposed_name",
    "MAX_TOOLS",
    "MAX_DESCRIPTION",
    "MAX_SCHEMA_BYTES",
    "SEPARATOR",
]

SEPARATOR = "__"
MAX_TOOLS = 128
MAX_DESCRIPTION = 1024
MAX_SCHEMA_BYTES = 16 * 1024
MAX_FUNCTION_NAME = 64
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")

Approval = Literal["Required", "Unattended"]


@dataclass(frozen=True)
class McpToolInfo:
    tool: str  # the server's name
    name: str  # what the model calls: <server>__<tool>
    description: str
    parameters: dict[str, Any]
    read_only: bool | None
    destructive: bool | None
    approval: Approval
    trusted_read_only: bool = False
    """The server says read-only (and not destructive) and the MCPServer trusts its hints: a
    call cut off by a restart is run again (`tools.base`), like the built-in reads."""


@dataclass(frozen=True)
class Skipped:
    tool: str
    reason: str


@dataclass(frozen=True)
class Policy:
    """The MCPServer's filters and approval policy (spec.tools, spec.approval, spec.trustHints)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    rules: tuple[tuple[tuple[str, ...], Approval], ...] = ()
    trust_hints: bool = False

    def offered(self, tool: str) -> str | None:
        """None when the filters offer `tool`, else why not."""
        if any(fnmatch.fnmatchcase(tool, g) for g in self.exclude):
            return "excluded by spec.tools.exclude"
        if self.include and not any(fnmatch.fnmatchcase(tool, g) for g in self.include):
            return "not in spec.tools.include"
        return None

    def approval(self, tool: str, read_only: bool | None, destructive: bool | None) -> Approval:
        """A server that says a tool is destructive is believed (that only asks for more care);
        one that says read-only is believed only with trustHints. Per the MCP spec a tool with
        no hints may be destructive."""
        if destructive is True:
            return "Required"
        for globs, approval in self.rules:
            if any(fnmatch.fnmatchcase(tool, g) for g in globs):
                return approval
        if self.trust_hints and read_only is True:
            return "Unattended"
        return "Required"


def clean_text(text: Any, limit: int) -> str:
    """Hostile text made printable and short: control and invisible characters removed."""
    value = _CONTROL.sub("", str(text or "")).strip()
    return value if len(value) <= limit else value[: limit - 1] + "…"


def exposed_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return "input schema is not an object"
    if schema.get("type", "object") != "object":
        return "input schema is not of type object"
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError):
        return "input schema is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"input schema larger than {MAX_SCHEMA_BYTES} bytes"
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(schema)
    except (exceptions.SchemaError, RecursionError) as exc:
        return f"invalid input schema: {clean_text(getattr(exc, 'message', exc), 120)}"
    return None


def _hint(annotations: Any, key: str) -> bool | None:
    value = getattr(annotations, key, None) if annotations is not None else None
    return value if isinstance(value, bool) else None


def build_catalog(server: str, tools: Sequence[Any], policy: Policy) -> tuple[list[McpToolInfo], list[Skipped]]:
    """The offered tools and the skipped ones from a listing (`mcp.types.Tool`-like objects)."""
    offered: list[McpToolInfo] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for raw in tools:
        tool = str(getattr(raw, "name", "") or "")
        shown = clean_text(tool, 80)
        if not _TOOL_NAME.match(tool):
            skipped.append(Skipped(shown, "name is not 1-64 characters of A-Z a-z 0-9 _ -"))
            continue
        name = exposed_name(server, tool)
        if len(name) > MAX_FUNCTION_NAME:
            skipped.append(Skipped(shown, f"{name} is longer than {MAX_FUNCTION_NAME} characters"))
            continue
        if tool in seen:
            skipped.append(Skipped(shown, "listed twice"))
            continue
        seen.add(tool)
        reason = policy.offered(tool)
        if reason is None:
            schema = getattr(raw, "inputSchema", None)
            reason = _schema_problem(schema)
        if reason is None and len(offered) >= MAX_TOOLS:
            reason = f"more than {MAX_TOOLS} tools"
        if reason is not None:
            skipped.append(Skipped(shown, reason))
            continue
        annotations = getattr(raw, "annotations", None)
        read_only, destructive = _hint(annotations, "readOnlyHint"), _hint(annotations, "destructiveHint")
        if read_only is True and destructive is None:
            destructive = False  # the spec: destructiveHint is meaningful only when not read-only
        offered.append(
            McpToolInfo(
                tool=tool,
                name=name,
                description=clean_text(
                    getattr(raw, "description", "") or getattr(raw, "title", "") or "", MAX_DESCRIPTION
                ),
                parameters=dict(schema),  # type: ignore[arg-type]
                read_only=read_only,
                destructive=destructive,
                approval=policy.approval(tool, read_only, destructive),
                trusted_read_only=policy.trust_hints and read_only is True and destructive is not True,
            )
        )
    return offered, skipped
