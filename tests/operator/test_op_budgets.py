"""Budgets: a run's own token limit, and a namespace's spend limit over a window, enforced
before a run starts and after each model call; the stop keeps what the run found."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from opkit import create_inv, phase_is, wait_inv
from prometheus_client import REGISTRY

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.modelserver.scenario import Usage


def probe(namespace: str, tag: str) -> ToolCall:
    return ToolCall(id=f"p-{tag}", name="slow_probe", arguments={"namespace": namespace, "tag": tag})


def spending(namespace: str, scenario: str) -> Scenario:
    """Two tool steps of 600 tokens each, then an answer."""
    return Scenario(
        name=scenario,
        steps=[
            Step(
                tool_calls=[probe(namespace, "one")],
                usage=Usage(prompt_tokens=500, completion_tokens=100, total_tokens=600),
            ),
            Step(
                tool_calls=[probe(namespace, "two")],
                usage=Usage(prompt_tokens=500, completion_tokens=100, total_tokens=600),
            ),
            Step(content="# Alert Explanation\nnever reached", usage=Usage(total_tokens=600)),
        ],
    )


def succeeded(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Succeeded")


def test_a_run_stops_when_it_passes_its_token_limit_and_keeps_its_findings(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(spending(namespace, scenario_name))
    start_operator(scenario_name)
    create_inv(api_client, namespace, "capped", maxTokens=1000)
    done = wait_inv(api_client, namespace, "capped", phase_is("Succeeded", "Failed"), timeout=60)
    cond = succeeded(done)
    assert (done["status"]["phase"], cond["reason"]) == ("Failed", "BudgetExceeded"), done["status"]
    assert "spent 1200 tokens; its spec.maxTokens is 1000" in cond["message"]
    # stopped before a third model call; both steps' tool calls and the usage are kept
    assert len(model_server.requests(scenario_name)) == 2
    assert [(c["name"], c["status"]) for c in done["status"]["toolCalls"]] == [
        ("slow_probe", "success"),
        ("slow_probe", "success"),
    ]
    assert done["status"]["usage"]["totalTokens"] == 1200


def test_an_answer_that_passes_the_limit_is_kept(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name, steps=[Step(content="# Alert Explanation\nAll fine.", usage=Usage(total_tokens=5000))]
        )
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "answered", maxTokens=100)
    done = wait_inv(api_client, namespace, "answered", phase_is("Succeeded", "Failed"), timeout=60)
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_a_namespace_spend_limit_stops_a_run_and_refuses_the_next(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    core = k8s.CoreV1Api(api_client)
    core.patch_namespace(
        namespace, {"metadata": {"annotations": {"lestrade.dev/spend-limit": "tokens=1000,window=1h"}}}
    )
    model_server.add_scenario(spending(namespace, scenario_name))
    start_operator(scenario_name, spend_ledger_namespace=namespace)
    create_inv(api_client, namespace, "first")
    first = wait_inv(api_client, namespace, "first", phase_is("Succeeded", "Failed"), timeout=60)
    cond = succeeded(first)
    assert (first["status"]["phase"], cond["reason"]) == ("Failed", "NamespaceBudgetExhausted"), first["status"]
    assert "the namespace spent 1200 tokens in the last 1h; its limit is 1000" in cond["message"]
    assert len(first["status"]["toolCalls"]) == 2
    calls = len(model_server.requests(scenario_name))
    assert calls == 2

    create_inv(api_client, namespace, "second")
    second = wait_inv(api_client, namespace, "second", phase_is("Succeeded", "Failed"), timeout=60)
    cond = succeeded(second)
    assert (second["status"]["phase"], cond["reason"]) == ("Failed", "NamespaceBudgetExhausted")
    assert cond["message"].startswith("Not started: the namespace spent 1200 tokens")
    assert len(model_server.requests(scenario_name)) == calls  # no model call at all

    ledger = core.read_namespaced_config_map(f"lestrade-spend-{namespace}", namespace)
    assert sum(int(v.split()[0]) for v in ledger.data.values()) == 1200
    assert REGISTRY.get_sample_value("lestrade_namespace_spend_tokens", {"namespace": namespace}) == 1200
    assert REGISTRY.get_sample_value("lestrade_namespace_spend_limit_tokens", {"namespace": namespace}) == 1000
    assert (
        REGISTRY.get_sample_value(
            "lestrade_budget_stops_total", {"kind": "Investigation", "reason": "NamespaceBudgetExhausted"}
        )
        >= 2
    )


def test_a_conversations_limit_applies_to_each_turn(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    from convkit import all_answered, ask, create_conv, wait_conv

    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[probe(namespace, "one")], usage=Usage(total_tokens=600)),
                Step(tool_calls=[probe(namespace, "two")], usage=Usage(total_tokens=600)),
                Step(tool_calls=[probe(namespace, "three")], usage=Usage(total_tokens=300)),
                Step(content="All fine.", usage=Usage(total_tokens=100)),
            ],
        )
    )
    start_operator(scenario_name)
    create_conv(api_client, namespace, "chat", "Is anything broken?", maxTokens=1000)
    first = wait_conv(api_client, namespace, "chat", all_answered(1))
    turn = first["status"]["turns"][0]
    assert turn["phase"] == "Failed" and "spent 1200 tokens; its spec.maxTokens is 1000" in turn["message"], turn
    # the next turn has its own budget: 300 + 100 tokens, answered (the whole chat is at 1600)
    ask(api_client, namespace, "chat", "And now?")
    second = wait_conv(api_client, namespace, "chat", all_answered(2))
    assert second["status"]["turns"][1]["phase"] == "Answered", second["status"]["turns"][1]
    assert second["status"]["usage"]["totalTokens"] == 1600
