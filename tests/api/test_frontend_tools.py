"""Frontend tools (reference 000): a pause-mode tool pauses the stream with
`pending_frontend_tool_calls`, the client runs it and resumes with `frontend_tool_results`,
and the model continues with that output; a noop-mode tool is answered at once with its canned
response. Real operator, real model requests."""

from __future__ import annotations

import json
from typing import Any

import httpx
from convkit import get_conv
from httpx_sse import connect_sse

from lestrade.modelserver import Scenario, Step, ToolCall

CHART = {
    "name": "render_chart",
    "description": "Render a chart in the user interface.",
    "mode": "pause",
    "parameters": {"type": "object", "properties": {"metric": {"type": "string"}}},
}
NAVIGATE = {
    "name": "navigate_to_page",
    "description": "Navigate to a page.",
    "mode": "noop",
    "noop_response": "Navigation triggered.",
}


def stream(http: httpx.Client, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with connect_sse(http, "POST", "/api/chat", json={**body, "stream": True}) as source:
        assert source.response.status_code == 200, source.response.read()
        return [(e.event, json.loads(e.data)) for e in source.iter_sse()]


def test_a_pause_tool_round_trip(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[ToolCall(id="chart-1", name="render_chart", arguments={"metric": "cpu"})]),
                Step(content="The chart says: {{ tool_output('render_chart') }}"),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        paused = stream(http, {"ask": "Show me CPU.", "frontend_tools": [CHART, NAVIGATE]})
        assert [name for name, _ in paused] == ["start_tool_calling", "token_count", "approval_required"]
        approval = paused[-1][1]
        assert approval["pending_approvals"] == []
        assert approval["pending_frontend_tool_calls"] == [
            {"tool_call_id": "chart-1", "tool_name": "render_chart", "arguments": {"metric": "cpu"}}
        ]
        # The model was offered the client's tools next to the server's.
        offered = [t["function"]["name"] for t in model_server.requests(scenario_name)[0]["tools"]]
        assert {"render_chart", "navigate_to_page", "slow_probe"} <= set(offered)

        # A result for a call that does not wait is refused; the real one resumes the chat.
        bogus = http.post(
            "/api/chat",
            json={
                "conversation_history": approval["conversation_history"],
                "frontend_tools": [CHART],
                "stream": True,
                "frontend_tool_results": [{"tool_call_id": "chart-9", "tool_name": "render_chart", "result": "x"}],
            },
        )
        assert bogus.status_code == 400 and bogus.json()["field"] == "frontend_tool_results"
        resumed = stream(
            http,
            {
                "ask": "Show me CPU.",
                "conversation_history": approval["conversation_history"],
                "frontend_tools": [CHART, NAVIGATE],
                "frontend_tool_results": [
                    {
                        "tool_call_id": "chart-1",
                        "tool_name": "render_chart",
                        "result": json.dumps({"rendered": True, "points": 42}),
                    }
                ],
            },
        )
    assert [name for name, _ in resumed] == ["tool_calling_result", "ai_message", "token_count", "ai_answer_end"]
    assert resumed[0][1]["result"]["data"] == '{"rendered": true, "points": 42}'
    assert resumed[-1][1]["analysis"] == 'The chart says: {"rendered": true, "points": 42}'
    conv = get_conv(api_client, namespace, approval["conversation_id"])
    assert conv["spec"]["frontendToolResults"] == {"chart-1": '{"rendered": true, "points": 42}'}


def test_a_noop_tool_is_answered_at_once_without_a_stream(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[ToolCall(id="nav-1", name="navigate_to_page", arguments={"page": "/dashboards"})]),
                Step(content="Opened it."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        response = http.post("/api/chat", json={"ask": "Open the dashboards.", "frontend_tools": [NAVIGATE]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["analysis"] == "Opened it."
    (call,) = body["tool_calls"]
    assert call["tool_name"] == "navigate_to_page" and call["result"]["data"] == "Navigation triggered."


def test_a_frontend_tool_named_like_a_server_tool_fails_the_turn(
    stack: Any, model_server: Any, scenario_name: str
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="never")]))
    s = stack(scenario_name)
    with s.client() as http:
        events = stream(http, {"ask": "Hi", "frontend_tools": [{**NAVIGATE, "name": "slow_probe"}]})
    assert [name for name, _ in events] == ["error"]
    assert "slow_probe" in events[0][1]["msg"]
    assert model_server.requests(scenario_name) == []


def test_a_frontend_tool_named_like_a_built_in_tool_is_a_400_and_creates_nothing(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    from kubernetes import client as k8s

    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="never")]))
    s = stack(scenario_name, operator=False)
    with s.client() as http:
        refused = http.post(
            "/api/chat",
            json={"ask": "Hi", "stream": True, "frontend_tools": [{**NAVIGATE, "name": "kubectl_describe"}]},
        )
    assert refused.status_code == 400, refused.text
    assert refused.json()["field"] == "frontend_tools" and "kubectl_describe" in refused.json()["detail"]
    listed = k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "conversations"
    )
    assert listed["items"] == []
