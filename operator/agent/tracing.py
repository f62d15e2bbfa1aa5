"""OpenTelemetry spans of the agent engine: one per model call and one per tool call.

Only the OpenTelemetry *API* is used here: without a configured SDK (the default) every span is
a no-op costing a function call. The operator configures the SDK and its OTLP exporter from the
standard `OTEL_*` variables when tracing is switched on (`lestrade.operator.base.tracing_setup`).
Attributes follow OpenTelemetry's GenAI semantic conventions where they exist (`gen_ai.*`);
a tool call's arguments and output never become attributes (they are cluster data and model
text: hostile, possibly sensitive) — only its name, outcome, duration and output size.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

__all__ = ["tracer", "fail", "TRACER_NAME"]

TRACER_NAME = "lestrade.operator"


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def fail(span: Span, reason: str, message: str = "") -> None:
    span.set_attribute("error.type", reason)
    span.set_status(Status(StatusCode.ERROR, message[:500] or reason))
