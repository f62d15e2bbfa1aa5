"""The scenarios' recorded metric series, served to the test Prometheus as a scrape target.

Each scenario declares its series (exposition syntax: `name{labels} value`); gauges keep their
value, counters grow by `per_scrape` at every scrape (Prometheus scrapes every second, so
`rate()` is `per_scrape` per second). One target serves every scenario of a run; Prometheus
(the real binary, `lestrade.localcluster.prometheus`) scrapes it, and the Prometheus tools of
whole-cluster runs query it like any Prometheus.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from lestrade.evals.scenario import MetricSpec
from lestrade.localcluster.processes import wait_until
from lestrade.localcluster.prometheus import PrometheusServer

__all__ = ["RecordedSeries", "recorded_prometheus"]

_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")


class RecordedSeries:
    """The exposition every scrape returns; thread-safe, scenarios added while serving."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: list[MetricSpec] = []
        self._scrapes = 0

    def add(self, specs: list[MetricSpec]) -> None:
        for spec in specs:
            if not _NAME.match(spec.series):
                raise ValueError(f"not a metric series: {spec.series!r}")
        with self._lock:
            self._series.extend(specs)

    def render(self) -> bytes:
        with self._lock:
            self._scrapes += 1
            n = self._scrapes
            series = list(self._series)
        lines: list[str] = []
        described: set[str] = set()
        for spec in series:
            name = _NAME.match(spec.series).group(1)  # type: ignore[union-attr]
            if name not in described:
                described.add(name)
                kind = "counter" if spec.per_scrape is not None else "gauge"
                lines.append(f"# HELP {name} {spec.help or name}")
                lines.append(f"# TYPE {name} {kind}")
            value = spec.value + (spec.per_scrape or 0) * n
            lines.append(f"{spec.series} {value:g}")
        return ("\n".join(lines) + "\n").encode()


@contextmanager
def recorded_prometheus(series: RecordedSeries) -> Iterator[str]:
    """A scrape target for `series` and a Prometheus scraping it; yields Prometheus' URL once it
    has scraped twice (so `rate()` has two samples)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 — http.server's naming
            ok = self.path.startswith("/metrics")
            body = series.render() if ok else b"not found"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # Prometheus stopped mid-scrape (shutdown)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="eval-metrics", daemon=True)
    thread.start()
    try:
        with PrometheusServer([f"127.0.0.1:{server.server_address[1]}"]) as prometheus:

            def scraped_twice() -> bool:
                answer = httpx.get(
                    f"{prometheus.url}/api/v1/query", params={"query": 'count_over_time(up{job="lestrade-test"}[1m])'}
                ).json()
                result = answer["data"]["result"]
                return bool(result) and float(result[0]["value"][1]) >= 2

            wait_until("Prometheus to scrape the recorded series twice", scraped_twice, timeout=90)
            yield prometheus.url
    finally:
        server.shutdown()
        server.server_close()
