"""Prometheus metrics shared by the operator and the API: the Kubernetes request layer
(`lestrade.kube`) and the API's open SSE streams. The operator's own (runs, model calls,
tools, approvals) are in `lestrade.operator.base.metrics`; both register in prometheus-client's
default registry, which each process serves on `/metrics` (README: "Metrics").

Hot paths take their label children from small caches: `Counter.labels()` takes a lock and
builds a tuple on every call, and the operator makes thousands of requests per minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge

__all__ = [
    "APISERVER_REQUESTS",
    "APISERVER_ERRORS",
    "SSE_STREAMS_OPEN",
    "count_apiserver_request",
    "count_apiserver_error",
    "sse_stream",
]

APISERVER_REQUESTS = Counter(
    "lestrade_apiserver_requests",
    "Requests to the Kubernetes API server that got an answer, by HTTP verb and status code "
    "(every attempt: a retried request counts once per try).",
    ["verb", "code"],
)
APISERVER_ERRORS = Counter(
    "lestrade_apiserver_request_errors",
    "Requests to the Kubernetes API server that got no answer (connection failed, timed out).",
    ["verb", "reason"],
)
SSE_STREAMS_OPEN = Gauge(
    "lestrade_api_sse_streams_open",
    "Server-sent-event streams the API is serving right now.",
)

_requests: dict[tuple[str, int], Counter] = {}


def count_apiserver_request(verb: str, code: int) -> None:
    child = _requests.get((verb, code))
    if child is None:
        child = _requests[(verb, code)] = APISERVER_REQUESTS.labels(verb, str(code))
    child.inc()


def count_apiserver_error(verb: str, error: BaseException) -> None:
    reason = "timeout" if isinstance(error, TimeoutError) else "connection"
    APISERVER_ERRORS.labels(verb, reason).inc()


@contextmanager
def sse_stream() -> Iterator[None]:
    """Counts one open SSE stream for as long as the block runs (wrap the event generator)."""
    SSE_STREAMS_OPEN.inc()
    try:
        yield
    finally:
        SSE_STREAMS_OPEN.dec()
