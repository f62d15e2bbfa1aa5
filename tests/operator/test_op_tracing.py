"""OpenTelemetry traces of a run, read back from a real OpenTelemetry Collector (its OTLP
receiver, spans written to a file): a span for the run, one per model call (model, tokens,
cost, latency, retries) and one per tool call (tool, outcome, output size — never the output),
linked to the Investigation by name and uid; and nothing is sent when tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import OperatorProcess, create_inv, phase_is, wait_inv, wait_until, write_model_list

from lestrade.localcluster.otelcol import Collector
from lestrade.modelserver import Scenario, Step, ToolCall

CANARY = "canary-7d1f-tool-output"

pytestmark = pytest.mark.binaries("otelcol")


def test_a_runs_spans_reach_the_collector(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    k8s.CoreV1Api(api_client).create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="app-config"), data={"note": CANARY})
    )
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="get-1",
                            name="kubectl_describe",
                            arguments={"kind": "configmap", "name": "app-config", "namespace": namespace},
                        )
                    ]
                ),
                Step(content="The config map is fine."),
            ],
        )
    )
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
    with Collector() as collector:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_SERVICE_NAME": "lestrade-test",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        op = OperatorProcess(cluster, namespace, models, tmp_path / "operator.log", env=env).start()
        try:
            created = create_inv(api_client, namespace, "traced")
            wait_inv(api_client, namespace, "traced", phase_is("Succeeded"), timeout=120)
            uid = created["metadata"]["uid"]

            def run_spans() -> list[dict[str, Any]]:
                spans = collector.spans()
                runs = [s for s in spans if s["attributes"].get("lestrade.run.uid") == uid]
                if not runs:
                    return []
                trace = [s for s in spans if s["traceId"] == runs[0]["traceId"]]
                return trace if len(trace) >= 4 else []

            spans = wait_until("the run's spans in the collector", run_spans, timeout=60, interval=0.2)
        finally:
            op.terminate()
    by_op: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_op.setdefault(span["attributes"].get("gen_ai.operation.name", ""), []).append(span)
    (run,) = by_op["invoke_agent"]
    assert run["resource"]["service.name"] == "lestrade-test"
    assert run["attributes"]["lestrade.run.name"] == "traced"
    assert run["attributes"]["k8s.namespace.name"] == namespace
    assert run["attributes"]["lestrade.run.kind"] == "Investigation"
    assert run["attributes"]["lestrade.run.outcome"] == "Done"
    chats = by_op["chat"]
    assert len(chats) == 2 and all(c["parentSpanId"] == run["spanId"] for c in chats)
    for chat in chats:
        assert (
            chat["attributes"]["gen_ai.request.model"].endswith(scenario_name)
            or chat["attributes"]["gen_ai.request.model"]
        )
        assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0
        assert chat["attributes"]["lestrade.model.retries"] == 0
        assert "lestrade.model.cost_usd" in chat["attributes"] and "lestrade.model.latency_s" in chat["attributes"]
    (tool,) = by_op["execute_tool"]
    assert tool["parentSpanId"] == run["spanId"]
    assert tool["attributes"]["gen_ai.tool.name"] == "kubectl_describe"
    assert tool["attributes"]["gen_ai.tool.call.id"] == "get-1"
    assert tool["attributes"]["lestrade.tool.outcome"] == "success"
    assert tool["attributes"]["lestrade.tool.output_bytes"] > 0
    assert int(tool["endTimeUnixNano"]) > int(tool["startTimeUnixNano"])
    # Never content: neither the tool's output nor the model's text is in any span.
    everything = json.dumps(spans)
    assert CANARY not in everything and "The config map is fine" not in everything


def test_tracing_is_off_by_default() -> None:
    """No OTLP variables: the operator installs no tracer provider and never loads the SDK."""
    from lestrade.operator.base.telemetry import tracing_enabled

    assert not tracing_enabled({})
    assert not tracing_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})
    assert not tracing_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"})
    assert tracing_enabled({"OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing_enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"})
    code = (
        "import sys, lestrade.operator.__main__\n"
        "from lestrade.operator.base.telemetry import configure_tracing\n"
        "assert configure_tracing({}) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
