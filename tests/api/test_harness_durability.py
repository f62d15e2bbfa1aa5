"""Harness sessions are Conversations: a relay survives an operator restart (answered while the
operator is down, the call runs once afterwards), and a session written with kubectl is held to
the same rules as one made by `POST /chat` (the CRD's messages, the operator's model check, the
turn's token budget bounding subagents too)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from opkit import (
    EFFECT_LABEL,
    PROBE_LABEL,
    OperatorThread,
    count_effects,
    model_list,
    test_registry,
    transcript_messages,
)
from test_harness_api import Session, answer, fix, relays

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall

GROUP, VERSION, PLURAL = "lestrade.dev", "v1alpha1", "conversations"


def conversation(api_client: Any, namespace: str, name: str) -> dict[str, Any]:
    return k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def create(api_client: Any, namespace: str, name: str, spec: dict[str, Any]) -> None:
    k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Conversation",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def turn_phase(api_client: Any, namespace: str, name: str) -> tuple[str | None, str]:
    turns = (conversation(api_client, namespace, name).get("status") or {}).get("turns") or []
    return (turns[0].get("phase"), str(turns[0].get("message") or "")) if turns else (None, "")


def test_a_relay_answered_while_the_operator_is_down_runs_once_after_the_restart(
    stack: Any, cluster: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix(namespace, "r", "f-1")]),
                Step(content="Fixed after the restart."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        session = Session(http, {"model": scenario_name, "messages": [{"role": "user", "content": "Fix."}]})
        session.until(lambda seen: relays(seen))
        wait_until(
            "status lists the relay",
            lambda: (
                [
                    p["toolCallId"]
                    for p in conversation(api_client, namespace, session.id)["status"].get("pendingApprovals") or []
                ]
                == ["f-1"]
            ),
            60,
        )
        s.operator.stop()  # the relay waited inside the run; nothing runs it now
        assert answer(http, session.id, "f-1", approved=True).json() == {"success": True}
        assert count_effects(api_client, namespace, EFFECT_LABEL, "r") == 0
        operator = OperatorThread(cluster, namespace, model_list(model_server, scenario_name), tools=test_registry)
        operator.start()
        try:
            events = session.rest()
        finally:
            operator.stop()
    assert [r["toolCallId"] for r in relays(events)] == ["f-1"]
    results = [d for n, d in events if n == "tool_result"]
    assert [(r["id"], r["output"]) for r in results] == [("f-1", "fix r applied")]  # not "outcome unknown"
    assert events[-1][0] == "harness_end" and events[-1][1]["reason"] == "final"
    assert count_effects(api_client, namespace, EFFECT_LABEL, "r") == 1
    assert len(model_server.requests(scenario_name)) == 2  # the waiting step was not asked again


def test_kubectl_written_sessions_meet_the_same_checks(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="hi")]))
    stack(scenario_name)
    with pytest.raises(ApiException) as refused:
        create(api_client, namespace, "too-deep", {"turns": [{"ask": "x"}], "harness": {"maxDepth": 9}})
    assert refused.value.status == 422
    assert "spec.harness.maxDepth must be between 0 and 5" in refused.value.body
    with pytest.raises(ApiException) as refused:
        create(api_client, namespace, "bad-mode", {"turns": [{"ask": "x"}], "harness": {"mode": "shell"}})
    assert "spec.harness.mode" in refused.value.body and "Unsupported value" in refused.value.body

    # The API checks the model, and so does the operator: the spec can be written with kubectl.
    create(
        api_client,
        namespace,
        "other-model",
        {
            "turns": [{"ask": "x"}],
            "harness": {},
            "model": "openai/gpt-4o",
        },
    )
    wait_until("the turn fails", lambda: turn_phase(api_client, namespace, "other-model")[0] == "Failed", 60)
    message = turn_phase(api_client, namespace, "other-model")[1]
    assert f"model 'openai/gpt-4o' is not allowed; allowed: openai/{scenario_name}, {scenario_name}" in message
    assert model_server.requests(scenario_name) == []

    # A provider/model id that the model list has is allowed.
    create(api_client, namespace, "by-id", {"turns": [{"ask": "x"}], "harness": {}, "model": f"openai/{scenario_name}"})
    wait_until("the turn is answered", lambda: turn_phase(api_client, namespace, "by-id")[0] == "Answered", 60)


def test_the_turns_token_budget_stops_subagents(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[ToolCall(id="spawn", name="agent", arguments={"task": "CHILD-TASK"})]),
                Step(content="never"),
            ],
            # Without a budget the child would probe again and again (until maxIterations).
            rules=[
                {
                    "when": {"last_user_contains": "CHILD-TASK"},
                    "respond": {
                        "tool_calls": [{"name": "slow_probe", "arguments": {"namespace": namespace, "tag": "b"}}]
                    },
                }
            ],
        )
    )
    stack(scenario_name)
    create(
        api_client,
        namespace,
        "budget",
        {
            "turns": [{"ask": "Go."}],
            "maxTokens": 1,
            "harness": {"permissions": {"allowlist": [{"tool": "agent"}, {"tool": "slow_probe"}]}},
        },
    )
    wait_until("the turn fails", lambda: turn_phase(api_client, namespace, "budget")[0] == "Failed", 60)
    obj = conversation(api_client, namespace, "budget")
    assert obj["status"]["turns"][0]["message"].startswith("Stopped: the run spent")
    state, _ = transcript_messages(api_client, obj)
    ends = [r for r in state.records if r.get("t") == "agent" and r.get("event") == "end"]
    assert [(r["agentId"], r["reason"]) for r in ends] == [("agent-spawn", "error")]
    assert "spec.maxTokens is 1" in ends[0]["error"]
    # The child stopped after its first model call (and that call's probe), before a second.
    assert len(model_server.requests(scenario_name)) == 2
    assert count_effects(api_client, namespace, PROBE_LABEL, "b") == 1
