"""The operator's Prometheus metrics, scraped over HTTP from its metrics port after real runs:
an Investigation that retries a model call, runs a read-only tool, calls a tool that does not
exist and waits for two approvals (one approved, one denied), and a Conversation turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from convkit import all_answered, create_conv, wait_conv
from kubernetes import client as k8s
from opkit import create_inv, patch_decisions, phase_is, wait_inv, wait_until
from prometheus_client.parser import text_string_to_metric_families

from lestrade.localcluster.cluster import free_port
from lestrade.modelserver import Fault, Scenario, Step, ToolCall, Usage

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the samples of `name` whose labels include `labels` (0 when none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def delta(before: Samples, after: Samples) -> Callable[..., float]:
    return lambda name, **labels: value(after, name, **labels) - value(before, name, **labels)


def test_metrics_after_an_investigation_and_a_conversation_turn(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    def fix(call_id: str, tag: str) -> ToolCall:
        return ToolCall(id=call_id, name="apply_fix", arguments={"namespace": namespace, "tag": tag})

    model = scenario_name
    model_server.add_scenario(
        Scenario(
            name=model,
            steps=[
                Step(
                    fault=Fault(kind="server_error", times=1),
                    usage=Usage(prompt_tokens=300, completion_tokens=40),
                    tool_calls=[
                        ToolCall(id="look", name="kubectl_events", arguments={"namespace": namespace}),
                        ToolCall(id="ghost", name="format_the_disk_of_every_node", arguments={}),
                        fix("fix-a", "a"),
                        fix("fix-b", "b"),
                    ],
                ),
                Step(
                    content="Fix A applied, fix B refused.",
                    latency_ms=150,
                    usage=Usage(prompt_tokens=500, completion_tokens=60),
                ),
            ],
        )
    )
    chat = f"{scenario_name}-chat"
    model_server.add_scenario(
        Scenario(
            name=chat, steps=[Step(content="Nothing is wrong.", usage=Usage(prompt_tokens=200, completion_tokens=10))]
        )
    )
    port = free_port()
    start_operator(model, chat, telemetry_metrics_port=port)
    before = scrape(port)

    create_inv(api_client, namespace, "metered")
    wait_inv(api_client, namespace, "metered", phase_is("AwaitingApproval", "Failed", "Succeeded"))
    pending = wait_until(
        "the pending approvals to show",
        lambda: (
            (s := scrape(port))
            and value(s, "lestrade_approvals_pending", kind="Investigation")
            - value(before, "lestrade_approvals_pending", kind="Investigation")
            == 2
            and s
        ),
    )
    d = delta(before, pending)
    assert d("lestrade_runs_total", kind="Investigation", phase="AwaitingApproval") == 1
    assert d("lestrade_runs_active", kind="Investigation") == 0

    patch_decisions(
        api_client,
        namespace,
        "metered",
        {"fix-a": {"approved": True}, "fix-b": {"approved": False, "reason": "not now"}},
    )
    final = wait_inv(api_client, namespace, "metered", phase_is("Failed", "Succeeded"))
    assert final["status"]["phase"] == "Succeeded"
    create_conv(api_client, namespace, "chat", "Is anything wrong?", model=chat)
    wait_conv(api_client, namespace, "chat", all_answered(1))
    d = delta(before, scrape(port))

    # runs by kind and phase, with their durations, steps and share of the step budget
    assert d("lestrade_runs_total", kind="Investigation", phase="Succeeded") == 1
    assert d("lestrade_runs_total", kind="Conversation", phase="Answered") == 1
    assert d("lestrade_runs_total", phase="Failed") == 0
    assert d("lestrade_run_duration_seconds_count", kind="Investigation", phase="Succeeded") == 1
    assert d("lestrade_run_duration_seconds_sum", kind="Investigation", phase="Succeeded") > 0
    assert d("lestrade_run_steps_sum", kind="Investigation") == 2
    assert d("lestrade_run_steps_sum", kind="Conversation") == 1
    assert d("lestrade_run_step_budget_used_ratio_count", kind="Investigation") == 1
    # model calls, latency and retries by model
    assert d("lestrade_model_calls_total", model=model) == 2
    assert d("lestrade_model_calls_total", model=chat) == 1
    assert d("lestrade_model_call_duration_seconds_count", model=model) == 2
    assert d("lestrade_model_call_duration_seconds_sum", model=model) >= 0.15
    assert d("lestrade_model_retries_total", model=model, reason="ServerError") == 1
    # tokens by model and namespace, as the provider reported them
    assert d("lestrade_model_tokens_total", model=model, namespace=namespace, type="prompt") == 800
    assert d("lestrade_model_tokens_total", model=model, namespace=namespace, type="completion") == 100
    assert d("lestrade_model_tokens_total", model=chat, namespace=namespace) == 210
    # tool calls by tool and outcome; a tool name the model made up is "unknown"
    assert d("lestrade_tool_calls_total", tool="kubectl_events", outcome="success") == 1
    assert d("lestrade_tool_calls_total", tool="apply_fix", outcome="success") == 1
    assert d("lestrade_tool_calls_total", tool="apply_fix", outcome="denied") == 1
    assert d("lestrade_tool_calls_total", tool="unknown", outcome="error") == 1
    assert d("lestrade_tool_calls_total", tool="format_the_disk_of_every_node") == 0
    assert d("lestrade_tool_call_duration_seconds_count", tool="kubectl_events") == 1
    # approvals: none pending any more, one wait measured
    assert d("lestrade_approvals_pending", kind="Investigation") == 0
    assert d("lestrade_approval_wait_seconds_count", kind="Investigation") == 1
    # the request layer counts the operator's writes
    assert d("lestrade_apiserver_requests_total", verb="PATCH", code="200") > 0
    assert d("lestrade_apiserver_requests_total", verb="POST", code="201") > 0
