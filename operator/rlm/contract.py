"""What the harness and the rlm package exchange: tool descriptions, refusals, model replies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ToolSpec", "ToolDenied", "DepthExceeded", "RlmReply", "RlmOutcome"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the code as a Python function of the same name (keyword arguments as in
    `parameters`, a JSON schema object; positional arguments follow its property order)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def param_names(self) -> list[str]:
        properties = self.parameters.get("properties") if isinstance(self.parameters, dict) else None
        return [str(p) for p in properties] if isinstance(properties, dict) else []

    @classmethod
    def of(cls, tool: Any) -> ToolSpec:
        """From a `lestrade.operator.tools.base.Tool` (anything with name/description/parameters)."""
        return cls(tool.name, tool.description, dict(tool.parameters))


class ToolDenied(Exception):
    """Raised by the harness's `call_tool` when a permission rule (or a person) refuses the call;
    the code sees a `ToolDenied` exception it can catch."""

    def __init__(self, reason: str = "denied") -> None:
        super().__init__(reason)
        self.reason = reason


class DepthExceeded(Exception):
    """Raised by the harness's `llm_query` when a recursive call would pass `maxDepth`."""


@dataclass(frozen=True)
class RlmReply:
    """One model call's answer: its text, its reasoning (if the model shows it), token usage."""

    text: str
    reasoning: str = ""
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RlmOutcome:
    reason: Literal["final", "max_iterations"]
    answer: str
    iterations: int
