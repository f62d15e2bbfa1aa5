"""The hosted chat API (reference 002) over real HTTP, answered by the real operator: the
`{cluster_id, analysis}` answer, account and cluster resolution, the documented statuses, and
stream mode with 002's own event payloads."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from apikit import conversations
from httpx_sse import connect_sse
from test_auth_api import grant

from lestrade.api.hosted.accounts import ClusterUnresolved, HostedSettings, resolve_cluster
from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Fault, Scenario, Step, ToolCall

PAYLOAD = {
    "alertname": "KubeContainerWaiting",
    "container": "frontend",
    "namespace": "production",
    "pod": "frontend-59fbcd7965-drx6w",
    "reason": "ContainerCreating",
    "severity": "warning",
}
TWO = HostedSettings(account_id="acct-1", clusters=("prod-us", "prod-eu"))


def stream(http: httpx.Client, path: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with connect_sse(http, "POST", path, json={**body, "stream": True}) as source:
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        return [(e.event, json.loads(e.data)) for e in source.iter_sse()]


# -- cluster resolution (pure) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "payload", "ask", "expected"),
    [
        ("prod-eu", {"cluster": "prod-us"}, "", "prod-eu"),  # 1. given wins
        (None, {"cluster_name": "prod-eu"}, "", "prod-eu"),  # 2. payload fields
        (None, {"cluster": "prod-us"}, "", "prod-us"),
        (None, {"cluster_id": "prod-eu"}, "", "prod-eu"),
        (None, {"source": "prod-us"}, "", "prod-us"),
        (None, {"labels": {"cluster": "prod-eu"}}, "", "prod-eu"),  # ... labels, annotations
        (None, {"annotations": {"cluster_name": "prod-us"}}, "", "prod-us"),
        (None, {"source": "prometheus", "labels": {"cluster": "prod-eu"}}, "", "prod-eu"),
        (None, {"description": "pods on prod-eu are pending"}, "", "prod-eu"),  # 3. the payload's text
        (None, None, "Which pods are failing on cluster prod-us?", "prod-us"),  # ... or the ask's
    ],
)
def test_cluster_resolution_order(given: str | None, payload: Any, ask: str, expected: str) -> None:
    assert resolve_cluster(given, payload, ask, TWO.clusters) == expected


def test_cluster_resolution_failures() -> None:
    with pytest.raises(ClusterUnresolved) as unknown:
        resolve_cluster("prod-asia", None, "", TWO.clusters)
    assert unknown.value.status == 404
    with pytest.raises(ClusterUnresolved) as named:
        resolve_cluster(None, {"labels": {"cluster": "staging"}}, "", TWO.clusters)
    assert named.value.status == 404 and "payload.cluster" in named.value.message
    for ask in ("what is failing?", "compare prod-us and prod-eu", "is prod-usa ok?"):
        with pytest.raises(ClusterUnresolved) as none:
            resolve_cluster(None, {"source": "prometheus"}, ask, TWO.clusters)
        assert none.value.status == 400 and "prod-us, prod-eu" in none.value.message
    assert resolve_cluster(None, {"source": "prometheus"}, "anything", ("only",)) == "only"  # 4. the single one


def test_settings_from_the_environment() -> None:
    assert HostedSettings.from_env({}) == HostedSettings(None, ("default",))
    assert HostedSettings.from_env({"LESTRADE_CLUSTER_NAME": "kind"}).clusters == ("kind",)
    settings = HostedSettings.from_env({"LESTRADE_ACCOUNT_ID": "a1", "LESTRADE_CLUSTER_NAMES": "x, y,x"})
    assert settings == HostedSettings("a1", ("x", "y"))


# -- over HTTP ----------------------------------------------------------------------------------------


def test_a_hosted_chat_answers_with_cluster_id_and_analysis(
    stack: Any, model_server: Any, scenario_name: str, api_client: Any, namespace: str
) -> None:
    model_server.add_scenario(
        Scenario(name=scenario_name, steps=[Step(content="## Investigation Summary\n\nMissing secret.")])
    )
    s = stack(scenario_name, hosted=HostedSettings(None, ("my-cluster",)))
    with s.client() as http:
        answer = http.post(
            "/api/holmes/any-account/chat",
            json={
                "cluster_id": "my-cluster",
                "ask": "Which pods are failing in the cluster?",
                "payload": PAYLOAD,
                "additional_system_prompt": "Answer in one table.",
            },
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"cluster_id": "my-cluster", "analysis": "## Investigation Summary\n\nMissing secret."}
        # The model saw the payload and the extra instructions in its system prompt.
        system = model_server.requests(scenario_name)[-1]["messages"][0]["content"]
        assert "frontend-59fbcd7965-drx6w" in system and "Answer in one table." in system and "my-cluster" in system
        # It is a Conversation turn, in the same log the context store reads.
        (conv,) = conversations(api_client, namespace)
        log = http.get(f"/v1/contexts/{conv['metadata']['name']}/tail").json()["messages"]
        assert [m["role"] for m in log] == ["system", "user", "assistant"]
        assert log[1]["parts"][0]["text"].startswith("Which pods are failing in the cluster?")
        # Without cluster_id: the single known cluster.
        again = http.post("/api/holmes/other-account/chat", json={"ask": "And now?"})
        assert again.status_code == 200 and again.json()["cluster_id"] == "my-cluster"


def test_account_and_cluster_statuses(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="Looked.")]))
    s = stack(scenario_name, hosted=TWO)
    with s.client() as http:
        wrong = http.post("/api/holmes/acct-2/chat", json={"ask": "hi", "cluster_id": "prod-us"})
        assert wrong.status_code == 404 and "acct-2" in wrong.json()["detail"]
        unknown = http.post("/api/holmes/acct-1/chat", json={"ask": "hi", "cluster_id": "prod-asia"})
        assert unknown.status_code == 404 and unknown.json()["clusters"] == ["prod-us", "prod-eu"]
        undetermined = http.post(
            "/api/holmes/acct-1/chat", json={"ask": "what is failing?", "payload": {"source": "prometheus"}}
        )
        assert undetermined.status_code == 400
        assert (
            undetermined.json()["clusters"] == ["prod-us", "prod-eu"]
            and "prod-us, prod-eu" in undetermined.json()["detail"]
        )
        for body, field in (
            ({}, "ask"),
            ({"ask": ""}, "ask"),
            ({"ask": "x", "payload": [1]}, "payload"),
            ({"ask": "x", "stream": "maybe"}, "stream"),
        ):
            bad = http.post("/api/holmes/acct-1/chat", json=body)
            assert bad.status_code == 400 and bad.json()["detail"].startswith(field), bad.text
        bad_model = http.post("/api/holmes/acct-1/chat", json={"ask": "x", "cluster_id": "prod-us", "model": "nope"})
        assert bad_model.status_code == 400 and "nope" in bad_model.json()["detail"]
        from_labels = http.post(
            "/api/holmes/acct-1/chat", json={"ask": "why?", "payload": {"labels": {"cluster": "prod-eu"}}}
        )
        assert from_labels.status_code == 200 and from_labels.json() == {"cluster_id": "prod-eu", "analysis": "Looked."}
        from_text = http.post("/api/holmes/acct-1/chat", json={"ask": "Which pods are failing on cluster prod-us?"})
        assert from_text.status_code == 200 and from_text.json()["cluster_id"] == "prod-us"


def test_a_failed_chat_is_a_500(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(
        Scenario(name=scenario_name, steps=[Step(content="never", fault=Fault(kind="rate_limit", retry_after=0))])
    )
    s = stack(scenario_name)
    with s.client() as http:
        failed = http.post("/api/holmes/a/chat", json={"ask": "hi"})
        assert failed.status_code == 500, failed.text
        assert failed.json()["error_code"] == "RATE_LIMITED" and failed.json()["detail"].startswith(
            "Holmes request failed"
        )
        events = stream(http, "/api/holmes/a/chat", {"ask": "hi"})
        assert [name for name, _ in events][-1] == "error"
        assert set(events[-1][1]) == {"msg", "error_code"} and events[-1][1]["error_code"] == "RATE_LIMITED"


def test_401_and_403(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any, cluster: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="ok")]))
    grant(api_client, namespace, "reader", [("investigations", ["create"]), ("conversations", ["get"])])
    s = stack(scenario_name, auth=True)
    reader = {"Authorization": f"Bearer {cluster.token_for(namespace, 'reader')}"}
    with s.client() as http:
        assert http.post("/api/holmes/a/chat", json={"ask": "hi"}).status_code == 401
        bad = http.post("/api/holmes/a/chat", json={"ask": "hi"}, headers={"Authorization": "Bearer not-a-token"})
        assert bad.status_code == 401
        wait_until("RBAC to allow", lambda: http.get("/api/model", headers=reader).status_code == 200, 30)
        refused = http.post("/api/holmes/a/chat", json={"ask": "hi"}, headers=reader)
        assert refused.status_code == 403 and "create conversations" in refused.json()["detail"]


def test_stream_mode_sends_002_payloads(stack: Any, model_server: Any, scenario_name: str, namespace: str) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    content="Let me look.",
                    tool_calls=[
                        ToolCall(id="call_1", name="slow_probe", arguments={"namespace": namespace, "tag": "t"})
                    ],
                ),
                Step(content="## Investigation Summary\n\nAll good."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        events = stream(http, "/api/holmes/a/chat", {"ask": "Which pods are failing?", "payload": PAYLOAD})
    names = [name for name, _ in events]
    assert names[-1] == "ai_answer_end" and names.count("ai_answer_end") == 1
    assert {"start_tool_calling", "tool_calling_result", "ai_message", "token_count"} <= set(names)
    start = next(d for n, d in events if n == "start_tool_calling")
    assert set(start) == {"tool_call_id", "tool_name", "description"}
    assert (
        start["tool_call_id"] == "call_1"
        and start["tool_name"] == "slow_probe"
        and "slow_probe" in start["description"]
    )
    result = next(d for n, d in events if n == "tool_calling_result")
    assert result["tool_call_id"] == "call_1" and result["name"] == "slow_probe"
    assert result["result"]["status"] == "success" and "data" in result["result"]
    assert next(d for n, d in events if n == "ai_message") == {"content": "Let me look."}
    for data in (d for n, d in events if n == "token_count"):
        assert set(data) == {"input_tokens", "output_tokens"} and data["input_tokens"] > 0
    assert events[-1][1] == {"analysis": "## Investigation Summary\n\nAll good."}


def test_stream_mode_approval_required_flags_the_pending_call(
    stack: Any, model_server: Any, scenario_name: str, namespace: str
) -> None:
    fix = ToolCall(id="call_xyz789", name="apply_fix", arguments={"namespace": namespace, "tag": scenario_name})
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(tool_calls=[fix]), Step(content="Fixed.")]))
    s = stack(scenario_name)
    with s.client() as http:
        events = stream(http, "/api/holmes/a/chat", {"ask": "Fix it."})
        assert events[-1][0] == "approval_required"
        history = events[-1][1]["conversation_history"]
        (call,) = [c for m in history for c in m.get("tool_calls") or []]
        assert call["id"] == "call_xyz789" and call["pending_approval"] is True
        assert call["function"]["name"] == "apply_fix"
        # The documented way on: /api/chat's tool_decisions with the returned history.
        resumed = stream(
            http,
            "/api/chat",
            {
                "conversation_history": history,
                "tool_decisions": [{"tool_call_id": "call_xyz789", "approved": True}],
            },
        )
    assert resumed[-1][0] == "ai_answer_end" and resumed[-1][1]["analysis"] == "Fixed."
