"""Helpers for the rlm tests: run code in the real sandboxed REPL, record the calls it makes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lestrade.operator.rlm import ExecResult, Repl, SandboxLimits, ToolSpec


class Calls:
    """An `on_call` handler that records each call and answers from a table of functions."""

    def __init__(self, **answers: Any) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.answers = answers

    async def __call__(self, name: str, args: dict[str, Any]) -> str:
        self.seen.append((name, dict(args)))
        answer = self.answers.get(name, "ok")
        if isinstance(answer, BaseException):
            raise answer
        return answer(**args) if callable(answer) else str(answer)


async def run_code(
    code: str, *, limits: SandboxLimits | None = None, functions: Iterable[ToolSpec] = (), on_call: Calls | None = None
) -> ExecResult:
    """One code block in a fresh REPL."""
    async with Repl(limits, functions=functions) as repl:
        return await repl.execute(code, on_call or Calls())


def failed_with(result: ExecResult, *names: str) -> bool:
    """The code's last line of error names one of these exceptions (the attempt was refused)."""
    assert result.error, f"expected the code to fail, it printed: {result.stdout!r}"
    last = result.error.strip().splitlines()[-1]
    return any(last.startswith(name) for name in names)
