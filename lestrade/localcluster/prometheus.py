"""Build a pinned Prometheus from Go modules, and run it for tests and demos.

Why build instead of download: the machine only reaches package registries, and the Go module
proxy is one of them. Prometheus' Go module is versioned v0.3xx.y (v0.310.0 is Prometheus 3.10),
so we build `cmd/prometheus` from a throwaway module that requires it (no `go mod tidy`: it
would also resolve every test-only and tag-excluded dependency; `go build -mod=mod` resolves just
what the binary needs), and cache the binary at
`$XDG_CACHE_HOME/lestrade/prometheus-<version>/prometheus` (default `~/.cache/...`).

Service-discovery plugins are left out with the `remove_all_sd` build tag: the tests scrape a
static target, and dropping the cloud SDKs roughly halves a slow build on a small machine.

`PrometheusServer` runs the binary on a free port in a temp dir, scraping static targets, and
waits until the server is ready (polling `/-/ready`, never sleeping blindly).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from lestrade.localcluster.build import cache_root

__all__ = [
    "PROMETHEUS_MODULE",
    "PROMETHEUS_VERSION",
    "PrometheusBuildError",
    "PrometheusServer",
    "ensure_prometheus",
    "prometheus_binary_path",
]

PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
# Prometheus 3.10.0. Newer releases need module versions the proxy this project reaches does
# not serve (checked for v0.316.0: client_golang/exp, pprof and pb33f pseudo-versions).
PROMETHEUS_VERSION = "v0.310.0"
_BUILD_TAGS = "remove_all_sd"
_BUILD_TIMEOUT_S = 3600


class PrometheusBuildError(RuntimeError):
    """Go is missing or the build failed; the message names the build log."""


def prometheus_binary_path(version: str = PROMETHEUS_VERSION) -> Path:
    return cache_root() / f"prometheus-{version}" / "prometheus"


def _go_module_files(version: str) -> dict[str, str]:
    return {
        "go.mod": f"module lestrade.local/build/prometheus\n\ngo 1.23\n\nrequire {PROMETHEUS_MODULE} {version}\n",
        "tools.go": (f'//go:build tools\n\npackage tools\n\nimport _ "{PROMETHEUS_MODULE}/cmd/prometheus"\n'),
    }


def ensure_prometheus(version: str = PROMETHEUS_VERSION, *, progress: Callable[[str], None] | None = None) -> Path:
    """Return the cached Prometheus binary, building it first if needed.

    Concurrent callers (parallel test processes) serialise on a lock file, so only one builds.
    """
    target = prometheus_binary_path(version)
    if _is_executable(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log_path = target.parent / "build.log"
    go = shutil.which("go")
    if go is None:
        log_path.write_text("go was not found on PATH\n")
        raise PrometheusBuildError(
            f"cannot build Prometheus {version}: the Go toolchain is not on PATH (see {log_path})"
        )
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_executable(target):  # another process built it while we waited
            return target
        if progress is not None:
            progress(f"compiling prometheus (no service discovery plugins; log {log_path})")
        _build(go, version, target, log_path)
    return target


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _build(go: str, version: str, target: Path, log_path: Path) -> None:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    with tempfile.TemporaryDirectory(prefix="lestrade-prometheus-build-") as tmp:
        work = Path(tmp)
        for name, text in _go_module_files(version).items():
            (work / name).write_text(text)
        partial = target.with_name(target.name + ".partial")
        steps = [
            [
                go,
                "build",
                "-trimpath",
                "-tags",
                _BUILD_TAGS,
                "-ldflags",
                "-s -w",
                "-o",
                str(partial),
                f"{PROMETHEUS_MODULE}/cmd/prometheus",
            ],
        ]
        with open(log_path, "w") as log:
            for argv in steps:
                log.write(f"$ {' '.join(argv)}\n")
                log.flush()
                try:
                    proc = subprocess.run(
                        argv,
                        cwd=work,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        timeout=_BUILD_TIMEOUT_S,
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    raise PrometheusBuildError(
                        f"building Prometheus {version} timed out after {_BUILD_TIMEOUT_S}s (see {log_path})"
                    ) from None
                if proc.returncode != 0:
                    raise PrometheusBuildError(
                        f"building Prometheus {version} failed (`go {argv[1]}` exited {proc.returncode}); "
                        f"see {log_path}"
                    )
        partial.replace(target)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """A Prometheus process on a free local port, scraping the given `host:port` targets.

    Use as a context manager; `url` is the base URL once started. Data lives in a temp dir
    that is removed on stop.
    """

    def __init__(
        self,
        targets: list[str],
        *,
        scrape_interval: str = "1s",
        binary: Path | None = None,
        ready_timeout: float = 60.0,
        rules: str | None = None,
        alertmanager: str | None = None,
    ) -> None:
        """`rules`: a rule file's YAML (alerting and recording rules); `alertmanager`: the
        `host:port` its alerts are sent to."""
        self.targets = targets
        self.rules = rules
        self.alertmanager = alertmanager
        self.scrape_interval = scrape_interval
        self.binary = binary
        self.ready_timeout = ready_timeout
        self.port = 0
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def _config(self) -> str:
        targets = ", ".join(f'"{t}"' for t in self.targets)
        text = (
            "global:\n"
            f"  scrape_interval: {self.scrape_interval}\n"
            f"  evaluation_interval: {self.scrape_interval}\n"
            "scrape_configs:\n"
            "  - job_name: lestrade-test\n"
            f"    static_configs:\n      - targets: [{targets}]\n"
        )
        if self.rules:
            text += "rule_files: [rules.yml]\n"
        if self.alertmanager:
            text += f'alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ["{self.alertmanager}"]\n'
        return text

    def start(self) -> PrometheusServer:
        binary = self.binary or ensure_prometheus()
        self._tmp = tempfile.TemporaryDirectory(prefix="lestrade-prometheus-")
        work = Path(self._tmp.name)
        (work / "prometheus.yml").write_text(self._config())
        if self.rules:
            (work / "rules.yml").write_text(self.rules)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log = open(work / "prometheus.log", "wb")
        self._proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            cwd=work,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_ready(work / "prometheus.log")
        return self

    def _wait_ready(self, log_path: Path) -> None:
        deadline = time.monotonic() + self.ready_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    raise RuntimeError(f"Prometheus exited with {self._proc.returncode} on start; see {log_path}")
                try:
                    if client.get(f"{self.url}/-/ready").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                # Poll interval for readiness, bounded by the deadline above.
                self._proc_wait(0.1)
        self.stop()
        raise RuntimeError(f"Prometheus not ready after {self.ready_timeout}s; see {log_path}")

    def _proc_wait(self, seconds: float) -> None:
        assert self._proc is not None
        try:
            self._proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass

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

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
