"""Child processes that never outlive the Python process that started them.

Each control-plane process gets its own session (so a terminal's Ctrl-C reaches only us and we
stop the children in order) and asks the kernel for SIGKILL when its parent dies (so even a
`kill -9` of Python leaves no etcd or apiserver behind). SIGKILL rather than SIGTERM: a graceful
apiserver shutdown waits on an etcd that died with it and can take minutes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ManagedProcess", "wait_until", "StartupError"]

_PR_SET_PDEATHSIG = 1


class StartupError(RuntimeError):
    """A component did not come up; the message names its log file."""


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class ManagedProcess:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise StartupError(
                f"{self.name} exited with code {self.popen.returncode}; "
                f"last lines of {self.log_path}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds; always reaps the process."""
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=timeout)


def wait_until(
    what: str,
    condition: Callable[[], bool],
    timeout: float,
    *,
    interval: float = 0.1,
    watch: list[ManagedProcess] | None = None,
) -> None:
    """Polls `condition` until it holds; fails fast when a watched process has died."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for proc in watch or []:
            proc.check_alive()
        try:
            if condition():
                return
        except Exception as exc:  # the condition probes a server that may not be up yet
            last_error = exc
        time.sleep(interval)
    logs = "".join(f"\n--- {p.name} ({p.log_path}):\n{p.log_tail()}" for p in watch or [])
    raise StartupError(f"timed out after {timeout:.0f}s waiting for {what} ({last_error}){logs}")
