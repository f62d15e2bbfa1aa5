"""Run a real Alertmanager (built from Go modules, `versions.py`) for tests and demos.

The binary is the `alertmanager` component, built on demand (`ensure_component`), not by
`make binaries`. `AlertmanagerServer` runs it on a free local port with clustering off and a
single receiver that sends nothing, and waits for `/-/ready` (polling, never sleeping blindly).
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from lestrade.localcluster.build import ensure_component

__all__ = ["AlertmanagerServer", "ensure_alertmanager"]

_CONFIG = """\
route:
  receiver: nowhere
  group_wait: 1h
receivers:
  - name: nowhere
"""


def ensure_alertmanager() -> Path:
    """The Alertmanager binary, built on first use (a file lock makes parallel callers wait)."""
    return ensure_component("alertmanager", quiet=True) / "alertmanager"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AlertmanagerServer:
    """An Alertmanager on a free local port; `url` is its base URL once started."""

    def __init__(self, *, binary: Path | None = None, ready_timeout: float = 60.0) -> None:
        self.binary = binary
        self.ready_timeout = ready_timeout
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> AlertmanagerServer:
        binary = self.binary or ensure_alertmanager()
        self._tmp = tempfile.TemporaryDirectory(prefix="lestrade-alertmanager-")
        work = Path(self._tmp.name)
        (work / "alertmanager.yml").write_text(_CONFIG)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        log_path = work / "alertmanager.log"
        with open(log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={work / 'alertmanager.yml'}",
                    f"--storage.path={work / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--cluster.listen-address=",  # no gossip: a single local instance
                ],
                cwd=work,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.ready_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"Alertmanager exited with {self._proc.returncode}: {log_path.read_text()[-2000:]}"
                    )
                try:
                    if client.get(f"{self.url}/-/ready").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                try:  # poll interval, bounded by the deadline
                    self._proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
        log_text = log_path.read_text()[-2000:]
        self.stop()
        raise RuntimeError(f"Alertmanager not ready after {self.ready_timeout}s: {log_text}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
