"""`/api/investigate`, `/api/stream/investigate`, `/api/workload_health_check` (Investigations)
and `/api/issue_chat`, `/api/stream/issue_chat`, `/api/workload_health_chat`,
`/api/stream/chat` (Conversations), as reference 001 documents them, over real HTTP."""

from __future__ import annotations

import json
from typing import Any

from httpx_sse import connect_sse
from kubernetes import client as k8s
from opkit import PROBE_LABEL, count_effects, unique

from lestrade.modelserver import Scenario, Step, ToolCall

ANSWER = "# Alert Explanation\nPod web was OOMKilled.\n\n# Next Steps\nRaise the memory limit."


def probe(namespace: str, tag: str) -> ToolCall:
    return ToolCall(id="p-1", name="slow_probe", arguments={"namespace": namespace, "tag": tag})


def investigations(api_client: Any, namespace: str) -> list[dict[str, Any]]:
    return k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "investigations"
    )["items"]


REQUEST = {
    "source": "prometheus",
    "title": "Pod CrashLoopBackOff",
    "description": "Pod is crashing repeatedly",
    "subject": {"namespace": "default", "pod": "web"},
    "context": {},
    "include_tool_calls": True,
}


def test_investigate_runs_an_investigation_and_answers_with_sections(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    fact = unique("fact")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[probe(namespace, fact)]),
                Step(content=ANSWER),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        response = http.post("/api/investigate", json={**REQUEST, "model": scenario_name})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["sections"]["Alert Explanation"] == "Pod web was OOMKilled."
        assert body["sections"]["Next Steps"] == "Raise the memory limit."
        assert "OOMKilled" in body["analysis"] and body["instructions"] == []
        (call,) = body["tool_calls"]
        assert call["tool_name"] == "slow_probe" and call["result"]["status"] == "success"
        assert call["result"]["data"] is None  # include_tool_call_results was not asked for
        assert body["metadata"]["usage"]["total_tokens"] > 0

        with_results = http.post("/api/investigate", json={**REQUEST, "include_tool_call_results": True})
        assert with_results.status_code == 200, with_results.text
        assert with_results.json()["tool_calls"][0]["result"]["data"] == f"probe {fact}: all good"
    created = {i["metadata"]["name"]: i for i in investigations(api_client, namespace)}
    assert body["investigation"] in created
    spec = created[body["investigation"]]["spec"]
    assert (spec["title"], spec["source"], spec["enableToolApproval"]) == ("Pod CrashLoopBackOff", "prometheus", False)


def test_stream_investigate_and_a_reconnect(stack: Any, model_server: Any, scenario_name: str, namespace: str) -> None:
    fact = unique("fact")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[probe(namespace, fact)]),
                Step(content=ANSWER),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        with connect_sse(http, "POST", "/api/stream/investigate", json=REQUEST) as source:
            events = list(source.iter_sse())
        assert [e.event for e in events] == [
            "start_tool_calling",
            "tool_calling_result",
            "token_count",
            "ai_message",
            "token_count",
            "ai_answer_end",
        ]
        end = json.loads(events[-1].data)
        assert end["sections"]["Next Steps"] == "Raise the memory limit." and end["instructions"] == []
        assert events[0].id.startswith("inv/api-")
        with connect_sse(
            http, "POST", "/api/stream/investigate", json=REQUEST, headers={"Last-Event-ID": events[1].id}
        ) as source:
            rest = list(source.iter_sse())
        assert [(e.event, e.id, e.data) for e in rest] == [(e.event, e.id, e.data) for e in events[2:]]
    assert count_effects(s.api_client, namespace, PROBE_LABEL, fact) == 1


def runner_parses(analysis: str) -> tuple[bool, str]:
    """What the Robusta runner does with the answer: JSON with a boolean `workload_healthy`
    (anything else is its "Error in holmes response format")."""
    result = json.loads(analysis)
    assert isinstance(result["workload_healthy"], bool), result
    return result["workload_healthy"], result["root_cause_summary"]


def test_workload_health_check_answers_the_json_the_runner_parses(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    # The model answers in its own words (headings); the structured-output request makes the
    # (scripted) provider send the JSON object, and the API hands the runner a real boolean.
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    content="# Workload healthy\nfalse\n\n# Root cause summary\nPod web was OOMKilled: the limit is 64Mi."
                )
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        response = http.post(
            "/api/workload_health_check",
            json={
                "ask": "Why is my deployment unhealthy?",
                "resource": {"name": "web", "kind": "Deployment"},
                "instructions": ["Check the rollout first."],
            },
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert runner_parses(body["analysis"]) == (False, "Pod web was OOMKilled: the limit is 64Mi.")
    assert body["tool_calls"] == []
    (inv,) = investigations(api_client, namespace)
    assert inv["spec"]["title"] == "Health check of Deployment web"
    assert inv["spec"]["subject"] == {"name": "web", "kind": "Deployment"}
    assert "Why is my deployment unhealthy?" in inv["spec"]["question"]
    assert "Check the rollout first." in inv["spec"]["question"]
    # asked of the model with structured output, and in the instructions every model reads
    (request,) = model_server.requests(scenario_name)
    schema = request["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["workload_healthy"]["type"] == "boolean"
    assert schema["required"] == ["workload_healthy", "root_cause_summary"]
    prompt = json.dumps(request["messages"])
    assert "workload_healthy" in prompt and "root_cause_summary" in prompt


def test_workload_health_check_without_structured_output_is_validated(
    stack: Any, model_server: Any, scenario_name: str
) -> None:
    # Providers that ignore response_format: the model writes the object in prose, with a
    # string verdict, or gives no verdict at all.
    vague = f"{scenario_name}-vague"
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            ignores_response_format=True,
            steps=[
                Step(
                    content='Done.\n```json\n{"workload_healthy": "yes", "root_cause_summary": "3/3 replicas ready"}\n```'
                )
            ],
        )
    )
    model_server.add_scenario(
        Scenario(name=vague, ignores_response_format=True, steps=[Step(content="It looks fine to me.")])
    )
    s = stack(scenario_name, vague)
    with s.client() as http:
        good = http.post("/api/workload_health_check", json={"ask": "Is web healthy?", "resource": {"name": "web"}})
        assert good.status_code == 200, good.text
        assert runner_parses(good.json()["analysis"]) == (True, "3/3 replicas ready")
        # no verdict: an error naming what is missing, never prose the runner would misparse
        bad = http.post(
            "/api/workload_health_check", json={"ask": "Is web healthy?", "resource": {"name": "web"}, "model": vague}
        )
    assert bad.status_code == 502, bad.text
    assert "workload_healthy" in bad.json()["detail"], bad.text
    assert "It looks fine to me." in bad.json()["analysis"]


def test_issue_chat_and_workload_health_chat_frame_a_new_conversation(
    stack: Any, model_server: Any, scenario_name: str
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="Increase the memory limit."),
                Step(content="Yes, after the rollout."),
            ],
        )
    )
    s = stack(scenario_name)
    history = [{"role": "system", "content": "You are a helpful assistant."}]
    with s.client() as http:
        issue = http.post(
            "/api/issue_chat",
            json={
                "ask": "How do I fix this issue?",
                "issue_type": "CrashLoopBackOff",
                "investigation_result": {"result": "Pod crashed due to OOM.", "tools": []},
                "conversation_history": history,
            },
        )
        assert issue.status_code == 200, issue.text
        body = issue.json()
        assert body["analysis"] == "Increase the memory limit."
        assert "Pod crashed due to OOM." in body["conversation_history"][0]["content"]
        # The documented follow-up: the same endpoint with the returned history, as a stream.
        with connect_sse(
            http,
            "POST",
            "/api/stream/issue_chat",
            json={
                "ask": "Will it hold?",
                "issue_type": "CrashLoopBackOff",
                "investigation_result": {"result": "Pod crashed due to OOM."},
                "conversation_history": body["conversation_history"],
            },
        ) as source:
            events = list(source.iter_sse())
        assert events[-1].event == "ai_answer_end"
        end = json.loads(events[-1].data)
        assert end["analysis"] == "Yes, after the rollout." and end["conversation_id"] == body["conversation_id"]

        health = http.post(
            "/api/workload_health_chat",
            json={
                "ask": "Check the workload health.",
                "resource": {"name": "web", "kind": "Deployment"},
                "workload_health_result": {"analysis": "Previous health check: all good.", "tools": []},
                "conversation_history": history,
            },
        )
        assert health.status_code == 200, health.text
        assert health.json()["conversation_id"] != body["conversation_id"]
        assert "Previous health check: all good." in health.json()["conversation_history"][0]["content"]


def test_stream_chat_streams_whatever_stream_says(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="Streamed.")]))
    s = stack(scenario_name)
    with (
        s.client() as http,
        connect_sse(http, "POST", "/api/stream/chat", json={"ask": "Hi", "stream": False}) as source,
    ):
        events = list(source.iter_sse())
    assert [e.event for e in events] == ["ai_message", "token_count", "ai_answer_end"]
