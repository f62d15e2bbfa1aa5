"""The `rlm` mode: the model reasons by writing Python that a sandboxed REPL runs (issue 16).

`run_rlm` (loop.py) drives the model; `Repl` (repl.py) runs its code in a separate CPython
confined by Landlock, seccomp and rlimits (sandbox.py, which says why not WebAssembly).
"""

from lestrade.operator.rlm.contract import DepthExceeded, RlmOutcome, RlmReply, ToolDenied, ToolSpec
from lestrade.operator.rlm.loop import RlmHooks, run_rlm
from lestrade.operator.rlm.repl import ExecResult, Repl
from lestrade.operator.rlm.sandbox import SandboxLimits, SandboxUnavailable

__all__ = [
    "ToolDenied",
    "DepthExceeded",
    "RlmReply",
    "RlmOutcome",
    "SandboxLimits",
    "SandboxUnavailable",
    "ToolSpec",
    "RlmHooks",
    "run_rlm",
    "Repl",
    "ExecResult",
]
