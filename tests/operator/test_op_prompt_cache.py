"""Cached prompt tokens a provider reports reach the run's status, the operator's metrics and the
transcript (which the API's SSE metadata is built from), through litellm's real client path."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from opkit import create_inv, phase_is, wait_inv
from test_op_metrics import delta, scrape

from lestrade.localcluster.cluster import free_port
from lestrade.modelserver import Scenario, Step, ToolCall, Usage


def test_cached_tokens_reach_status_and_metrics(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="look", name="kubectl_events", arguments={"namespace": namespace})],
                    usage=Usage(prompt_tokens=1000, completion_tokens=20),
                ),
                Step(
                    content="# Alert Explanation\nNothing wrong.",
                    usage=Usage(prompt_tokens=1300, completion_tokens=30, cached_tokens=1000),
                ),
            ],
        )
    )
    port = free_port()
    start_operator(scenario_name, telemetry_metrics_port=port)
    before = scrape(port)
    create_inv(api_client, namespace, "cached")
    done = wait_inv(api_client, namespace, "cached", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"]
    usage = done["status"]["usage"]
    assert (usage["promptTokens"], usage["cachedTokens"]) == (2300, 1000), usage
    d = delta(before, scrape(port))
    assert d("lestrade_model_tokens_total", type="cached") == 1000
    assert d("lestrade_model_tokens_total", type="prompt") == 2300
