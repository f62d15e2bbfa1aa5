"""OpenTelemetry traces of the operator's runs: off by default, on with the standard variables.

Tracing is on when `OTEL_TRACES_EXPORTER` names `otlp` or an OTLP endpoint is set
(`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), unless
`OTEL_SDK_DISABLED=true`. Spans go over OTLP/HTTP (protobuf); the exporter reads the rest of
the standard `OTEL_EXPORTER_OTLP_*` variables itself (headers, timeout, certificates), and the
resource `OTEL_SERVICE_NAME` (default `lestrade-operator`) and `OTEL_RESOURCE_ATTRIBUTES`.
The SDK is imported only then: an operator without tracing never loads it. What the spans say:
`lestrade.operator.agent.tracing`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

__all__ = ["tracing_enabled", "configure_tracing"]

logger = logging.getLogger(__name__)


def tracing_enabled(env: Mapping[str, str]) -> bool:
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return False
    exporters = {e.strip() for e in (env.get("OTEL_TRACES_EXPORTER") or "").split(",")}
    if "none" in exporters:
        return False
    return "otlp" in exporters or bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_tracing(env: Mapping[str, str], service_name: str = "lestrade-operator") -> Callable[[], None] | None:
    """Installs the process's tracer provider when tracing is on; returns its shutdown (which
    sends what is still buffered), or None when tracing is off."""
    if not tracing_enabled(env):
        return None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    )
    if protocol != "http/protobuf":
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; sending http/protobuf", protocol)
    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    logger.info("OpenTelemetry traces are sent over OTLP/HTTP")
    return provider.shutdown
