"""Shared plumbing for the built-in tools: one `Tool` class, argument checks, output limits.

Each built-in tool is a `FunctionTool`: a schema plus an async handler. Keeping the protocol
glue in one place means every tool gets the same guarantees without repeating them: bad
arguments become a readable error instead of an exception in the agent loop, output is capped
(a model's context is finite), and everything passes through `redact` (in a worker thread) on the way out.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from lestrade.operator.tools.base import ToolOutput
from lestrade.operator.tools.redact import redact_async

__all__ = [
    "MAX_OUTPUT_CHARS",
    "FunctionTool",
    "Params",
    "ToolInputError",
    "cap_text",
    "schema",
]

MAX_OUTPUT_CHARS = 30_000

_K8S_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.:@]{0,251}[A-Za-z0-9])?$")


class ToolInputError(ValueError):
    """The model passed arguments the tool cannot use; the message tells it how to fix them."""


def schema(required: list[str] | None = None, **props: dict[str, Any]) -> dict[str, Any]:
    """A compact JSON schema for an arguments object."""
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def cap_text(text: str, limit: int = MAX_OUTPUT_CHARS, *, keep: str = "head") -> str:
    """Bound `text` to about `limit` characters, saying how much was cut.

    `keep="tail"` keeps the end (logs: the newest lines matter most).
    """
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "tail":
        body = text[-limit:]
        nl = body.find("\n")
        if 0 <= nl < 200:
            body = body[nl + 1 :]
        return f"[... {cut} earlier characters truncated]\n{body}"
    body = text[:limit]
    nl = body.rfind("\n")
    if nl > limit - 200:
        body = body[:nl]
    return f"{body}\n[... {cut} more characters truncated; narrow the query]"


class Params:
    """Typed access to a tool call's arguments with model-readable errors."""

    def __init__(self, raw: dict[str, Any] | None) -> None:
        self.raw = raw or {}

    def required(self, key: str) -> str:
        value = self.opt_str(key)
        if not value:
            raise ToolInputError(f"missing required parameter '{key}'")
        return value

    def opt_str(self, key: str, default: str | None = None) -> str | None:
        value = self.raw.get(key)
        if value is None or value == "":
            return default
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise ToolInputError(f"parameter '{key}' must be a string")
        return value.strip()

    def integer(
        self, key: str, default: int | None = None, *, lo: int | None = None, hi: int | None = None
    ) -> int | None:
        value = self.raw.get(key)
        if value is None or value == "":
            return default
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ToolInputError(f"parameter '{key}' must be an integer") from None
        if lo is not None and number < lo:
            raise ToolInputError(f"parameter '{key}' must be >= {lo}")
        if hi is not None and number > hi:
            number = hi
        return number

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.raw.get(key)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ToolInputError(f"parameter '{key}' must be true or false")

    def name(self, key: str, *, required: bool = True) -> str | None:
        """A Kubernetes object or namespace name (validated: it becomes part of a URL path)."""
        value = self.required(key) if required else self.opt_str(key)
        if value is None:
            return None
        if not _K8S_NAME.match(value) or ".." in value:
            raise ToolInputError(f"'{value}' is not a valid Kubernetes name for parameter '{key}'")
        return value


Handler = Callable[[Params], Awaitable[ToolOutput | str]]


def _no_approval(_: Params) -> bool:
    return False


@dataclass
class FunctionTool:
    """A `Tool` backed by an async handler; output is capped and redacted."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    summary: Callable[[Params], str]
    approval: Callable[[Params], bool] = _no_approval
    max_chars: int = MAX_OUTPUT_CHARS
    keep: str = "head"
    extra: dict[str, Any] = field(default_factory=dict)
    read_only: bool | Callable[[dict[str, Any]], bool] = False
    """Whether a call only reads (safe to run again after a restart); see `tools.base`."""
    available: Callable[[], Awaitable[bool]] | None = None
    """Whether the tool can work at all here (e.g. the API it reads is served); a run is not
    offered a tool that cannot (its schema would cost tokens on every request for nothing)."""

    def needs_approval(self, params: dict[str, Any]) -> bool:
        try:
            return self.approval(Params(params))
        except ToolInputError:
            return False  # the call will fail with a clear error without doing anything

    def describe(self, params: dict[str, Any]) -> str:
        try:
            return self.summary(Params(params))
        except Exception:  # a bad argument must not break the description line
            return f"{self.name} {params}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        try:
            result = await self.handler(Params(params))
        except ToolInputError as exc:
            return ToolOutput(status="error", error=str(exc))
        except Exception as exc:  # noqa: BLE001 — the model should see the failure, not the loop crash
            return ToolOutput(status="error", error=await redact_async(f"{type(exc).__name__}: {exc}"))
        if isinstance(result, str):
            result = ToolOutput(status="success" if result.strip() else "no_data", data=result)
        return ToolOutput(
            status=result.status,
            # Redact before capping: a cut could separate a private key from its BEGIN line.
            # Off the event loop: a large output must not stall the other runs.
            data=cap_text(await redact_async(result.data), self.max_chars, keep=self.keep),
            error=await redact_async(result.error) if result.error else None,
        )
