"""Real MCP servers for the tests, each a process on a free port of its own.

- `mcp_servers`: a factory; `mcp_servers()` starts the SDK-written test server
  (`mcp_testserver.py`: every failure mode) and returns it; `.restart()` brings it back on the
  same port after a tool killed it.
- `time_mcp_server`: a third-party server from PyPI, `mcp-server-time` (stdio), served over
  streamable HTTP (`/mcp`) and SSE (`/sse`) by `mcp-proxy`, also from PyPI.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = ["McpProcess", "mcp_servers", "time_mcp_server", "free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class McpProcess:
    command: list[str]
    port: int
    log: Path
    effects: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The streamable-HTTP endpoint."""
        return f"{self.base}/mcp"

    def start(self, timeout: float = 60.0) -> McpProcess:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not _listening(self.port):  # the server's own readiness: its port accepts
            if self.process.poll() is not None:
                raise RuntimeError(f"MCP server exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"MCP server not listening after {timeout}s: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def restart(self) -> McpProcess:
        self.stop()
        return self.start()

    def effects_log(self) -> list[str]:
        path = (self.effects or Path("/nonexistent")) / "effects.log"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def mcp_servers(tmp_path: Path) -> Iterator[Callable[..., McpProcess]]:
    started: list[McpProcess] = []

    def start(require_header: str | None = None) -> McpProcess:
        port = free_port()
        effects = tmp_path / f"effects-{port}"
        command = [
            sys.executable,
            "-m",
            "lestrade.testing.mcp_testserver",
            "--port",
            str(port),
            "--effects",
            str(effects),
        ]
        if require_header:
            command += ["--require-header", require_header]
        server = McpProcess(command, port, tmp_path / f"mcp-{port}.log", effects)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def time_mcp_server(tmp_path: Path) -> Iterator[McpProcess]:
    bin_dir = Path(sys.executable).parent
    port = free_port()
    server = McpProcess(
        [
            str(bin_dir / "mcp-proxy"),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--",
            str(bin_dir / "mcp-server-time"),
            "--local-timezone",
            "UTC",
        ],
        port,
        tmp_path / "mcp-time.log",
    )
    yield server.start()
    server.stop()
