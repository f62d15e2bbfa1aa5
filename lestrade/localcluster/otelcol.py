"""Build a minimal OpenTelemetry Collector from Go modules, and run it for the tracing tests.

A real OTLP receiver, not a stand-in: the Collector's own OTLP receiver (`otlpreceiver`, the
reference implementation of the protocol) and the contrib file exporter, which writes every
span it receives as OTLP/JSON lines to a file the tests read back. Jaeger's all-in-one (also
Apache-2.0, also buildable from its Go module) would do too, but it compiles every storage
backend (Cassandra, Elasticsearch, Kafka, Badger, ...) — several times the packages of this
two-component collector, too heavy for the shared 2-core machine. The collector has no
published `main` for a chosen set of components (the `ocb` builder generates one), so the few
lines it would generate are here (`MAIN_GO`), built in a throwaway module whose go.mod pins the
component versions (`go build -mod=mod`: no test-only dependencies resolved), cached at
`<cache>/otelcol-<version>/otelcol`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from lestrade.localcluster.build import cache_root

__all__ = ["OTELCOL_VERSION", "OtelcolBuildError", "Collector", "ensure_otelcol", "otelcol_binary_path"]

OTELCOL_VERSION = "v0.165.0"
_REQUIRES = {
    "go.opentelemetry.io/collector/otelcol": "v0.165.0",
    "go.opentelemetry.io/collector/receiver/otlpreceiver": "v0.165.0",
    "go.opentelemetry.io/collector/component": "v1.71.0",
    "go.opentelemetry.io/collector/confmap": "v1.71.0",
    "go.opentelemetry.io/collector/exporter": "v1.71.0",
    "go.opentelemetry.io/collector/receiver": "v1.71.0",
    "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter": "v0.165.1",
}
_BUILD_TIMEOUT_S = 3600

MAIN_GO = """// A minimal OpenTelemetry Collector for Lestrade's tests: the OTLP receiver and the file exporter.
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return factories, err
	}
	factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory())
	return factories, err
}

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-lestrade", Description: "OTLP in, file out", Version: "test"},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{envprovider.NewFactory(), fileprovider.NewFactory()},
				DefaultScheme:     "env",
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatal(err)
	}
}
"""


class OtelcolBuildError(RuntimeError):
    """Go is missing or the build failed; the message names the build log."""


def otelcol_binary_path(version: str = OTELCOL_VERSION) -> Path:
    # The folder names the sources too: a changed main.go or pin is a new build, never a stale one.
    digest = hashlib.sha256((MAIN_GO + repr(sorted(_REQUIRES.items()))).encode()).hexdigest()[:8]
    return cache_root() / f"otelcol-{version}-{digest}" / "otelcol"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ensure_otelcol(version: str = OTELCOL_VERSION) -> Path:
    """The cached collector, built first if needed (parallel callers wait on a lock file)."""
    target = otelcol_binary_path(version)
    if _is_executable(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log_path = target.parent / "build.log"
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise OtelcolBuildError(f"cannot build the OpenTelemetry Collector: Go is not on PATH (see {log_path})")
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_executable(target):
            return target
        requires = "\n".join(f"\t{m} {v}" for m, v in _REQUIRES.items())
        with tempfile.TemporaryDirectory(prefix="lestrade-otelcol-build-") as tmp:
            work = Path(tmp)
            (work / "go.mod").write_text(
                f"module lestrade.local/build/otelcol\n\ngo 1.24\n\nrequire (\n{requires}\n)\n"
            )
            (work / "main.go").write_text(MAIN_GO)
            partial = target.with_name("otelcol.partial")
            argv = [go, "build", "-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."]
            with open(log_path, "w") as log:
                log.write(f"$ {' '.join(argv)}\n")
                log.flush()
                try:
                    proc = subprocess.run(
                        argv,
                        cwd=work,
                        env={**os.environ, "CGO_ENABLED": "0"},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        timeout=_BUILD_TIMEOUT_S,
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    raise OtelcolBuildError(f"building the collector timed out (see {log_path})") from None
            if proc.returncode != 0:
                raise OtelcolBuildError(f"building the collector failed (exit {proc.returncode}); see {log_path}")
            partial.replace(target)
    return target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Collector:
    """The collector on free ports in a temp dir: OTLP/HTTP in (`endpoint`), spans out to a file
    (`spans()` reads them back as OTLP/JSON resource spans)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.health_port = _free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="lestrade-otelcol-"))
        self.output = self._dir / "spans.jsonl"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _config(self) -> str:
        return json.dumps(
            {
                "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{self.port}"}}}},
                "exporters": {"file": {"path": str(self.output), "format": "json", "flush_interval": "100ms"}},
                "service": {
                    "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
                    "telemetry": {"metrics": {"level": "none"}},
                },
            }
        )

    def start(self, timeout: float = 60) -> Collector:
        binary = ensure_otelcol()
        config = self._dir / "config.yaml"
        config.write_text(self._config())  # JSON is YAML
        log = open(self._dir / "otelcol.log", "wb")  # noqa: SIM115 - closed with the process
        self._proc = subprocess.Popen([str(binary), "--config", f"file:{config}"], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while True:  # ready once the OTLP endpoint answers (an empty export is accepted)
            try:
                response = httpx.post(f"{self.endpoint}/v1/traces", json={"resourceSpans": []}, timeout=2)
                if response.status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the collector did not start: {self.log()[-2000:]}")
            time.sleep(0.1)

    def log(self) -> str:
        path = self._dir / "otelcol.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def spans(self) -> list[dict[str, Any]]:
        """Every span received so far, each with its resource's attributes under `resource`."""
        if not self.output.exists():
            return []
        found = []
        for line in self.output.read_text().splitlines():
            if not line.strip():
                continue
            for resource_spans in json.loads(line).get("resourceSpans") or []:
                resource = _attributes(resource_spans.get("resource") or {})
                for scope in resource_spans.get("scopeSpans") or []:
                    for span in scope.get("spans") or []:
                        found.append({**span, "attributes": _attributes(span), "resource": resource})
        return found

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _attributes(item: dict[str, Any]) -> dict[str, Any]:
    """OTLP/JSON `attributes: [{key, value: {stringValue|intValue|doubleValue|boolValue}}]` as a dict."""
    out: dict[str, Any] = {}
    for attr in item.get("attributes") or []:
        value = attr.get("value") or {}
        if "intValue" in value:
            out[attr["key"]] = int(value["intValue"])  # int64 travels as a string in OTLP/JSON
        elif value:
            out[attr["key"]] = next(iter(value.values()))
    return out
