"""`/api/chat` and `/api/model` over real HTTP, answered by the real operator from Conversations
on the real apiserver: new chats, follow-ups that resend the history, the SSE stream read by an
independent SSE client, reconnects with Last-Event-ID to another replica, keep-alives."""

from __future__ import annotations

import json
from typing import Any

import httpx
from apikit import conversations, fetch_event_source_messages, serve
from convkit import all_answered, wait_conv
from httpx_sse import connect_sse
from opkit import PROBE_LABEL, count_effects, model_list, unique

from lestrade.api.app import create_app
from lestrade.modelserver import Scenario, Step, ToolCall


def probe(call_id: str, namespace: str, tag: str, seconds: float = 0) -> ToolCall:
    return ToolCall(id=call_id, name="slow_probe", arguments={"namespace": namespace, "tag": tag, "seconds": seconds})


def sse_events(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Any]:
    with connect_sse(client, "POST", path, json=body, headers=headers or {}) as source:
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        return list(source.iter_sse())


def test_model_lists_the_model_list_names(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, "second-model", operator=False)
    response = httpx.get(f"{s.base}/api/model")
    assert response.status_code == 200
    assert response.json() == {"model_name": [scenario_name, "second-model"]}


def test_a_chat_becomes_a_conversation_and_a_follow_up_continues_it(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    fact = unique("fact")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[probe("p-1", namespace, fact)]),
                Step(content="The probe ran."),
                Step(content="Earlier the probe said: {{ tool_output('slow_probe') }}"),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        first = http.post(
            "/api/chat",
            json={
                "ask": "Probe the thing.",
                "model": scenario_name,
                "conversation_history": [{"role": "system", "content": "You are a helpful assistant."}],
            },
        )
        assert first.status_code == 200, first.text
        body = first.json()
        assert body["analysis"] == "The probe ran."
        history = body["conversation_history"]
        assert history[0]["role"] == "system" and history[0]["conversation_id"] == body["conversation_id"]
        assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "assistant"]
        assert history[-1]["content"] == "The probe ran."
        (call,) = body["tool_calls"]
        assert call["tool_call_id"] == "p-1" and call["tool_name"] == "slow_probe"
        assert call["result"]["status"] == "success" and call["result"]["data"] == f"probe {fact}: all good"
        assert call["result"]["params"] == {"namespace": namespace, "tag": fact, "seconds": 0}
        assert body["follow_up_actions"] == [] and body["pending_approvals"] is None
        usage = body["metadata"]["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
        assert body["metadata"]["max_tokens"] > 0 and body["metadata"]["tokens"]["system_tokens"] > 0

        # `kubectl get conv` shows the chat; the follow-up continues the same Conversation.
        # (Authentication is off here, so the body must say it is JSON; a body without a
        # Content-Type, as the Robusta runner sends it, is read with authentication on:
        # test_auth_api.)
        (conv,) = conversations(api_client, namespace)
        assert conv["metadata"]["name"] == body["conversation_id"]
        raw = json.dumps({"ask": "What did the probe say?", "conversation_history": history}).encode()
        second = http.post("/api/chat", content=raw, headers={"Content-Type": "application/json"})
        assert second.status_code == 200, second.text
        again = second.json()
        assert again["conversation_id"] == body["conversation_id"]
        assert again["analysis"] == f"Earlier the probe said: probe {fact}: all good"
        assert again["tool_calls"] == []
        assert [m["role"] for m in again["conversation_history"]][-2:] == ["user", "assistant"]
    # The answer is in the transcript before status says so: wait for status to catch up.
    conv = wait_conv(api_client, namespace, body["conversation_id"], all_answered(2))
    assert [t["ask"] for t in conv["spec"]["turns"]] == ["Probe the thing.", "What did the probe say?"]
    assert [t["answer"] for t in conv["status"]["turns"]] == [body["analysis"], again["analysis"]]
    assert count_effects(api_client, namespace, PROBE_LABEL, fact) == 1


def test_the_stream_in_holmes_wire_format_and_a_reconnect_to_another_replica(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any, cluster: Any
) -> None:
    fact = unique("fact")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="Let me look.", tool_calls=[probe("p-1", namespace, fact)]),
                Step(content="All good."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        events = sse_events(http, "/api/chat", {"ask": "Check it.", "stream": True})
    names = [e.event for e in events]
    assert names == [
        "ai_message",
        "start_tool_calling",
        "tool_calling_result",
        "token_count",
        "ai_message",
        "token_count",
        "ai_answer_end",
    ]
    payloads = [json.loads(e.data) for e in events]
    assert payloads[0]["content"] == "Let me look."
    assert payloads[1] == {"tool_name": "slow_probe", "id": "p-1"}
    result = payloads[2]
    assert result["tool_call_id"] == "p-1" and result["role"] == "tool" and result["name"] == "slow_probe"
    assert result["description"] == f"slow probe {fact}"
    assert result["result"] == {
        "status": "success",
        "data": f"probe {fact}: all good",
        "error": None,
        "params": {"namespace": namespace, "tag": fact, "seconds": 0},
    }
    assert payloads[3]["metadata"]["usage"]["total_tokens"] > 0
    end = payloads[-1]
    assert end["analysis"] == "All good." and end["follow_up_actions"] == []
    assert end["conversation_history"][-1] == {"role": "assistant", "content": "All good."}
    assert end["metadata"]["usage"]["total_tokens"] == sum(
        p["metadata"]["usage"]["total_tokens"] for p in (payloads[3], payloads[5])
    )
    ids = [e.id for e in events]
    conv = end["conversation_id"]
    assert all(i.startswith(f"conv/{conv}/") for i in ids) and len(set(ids)) == len(ids)

    # Another replica (a second API process state: its own watch, no shared memory) continues
    # the stream from any event: exactly the rest, same ids, same payloads.
    with (
        cluster.api_client() as other_client,
        serve(create_app(other_client, namespace=namespace, models=model_list(model_server, scenario_name))) as other,
    ):
        with httpx.Client(base_url=other, timeout=60) as http:
            for cut in (0, 1, 3):
                rest = sse_events(
                    http, "/api/chat", {"ask": "Check it.", "stream": True}, headers={"Last-Event-ID": ids[cut]}
                )
                assert [(e.event, e.id, e.data) for e in rest] == [(e.event, e.id, e.data) for e in events[cut + 1 :]]
            # After the last event there is nothing more: the stream ends at once.
            assert (
                sse_events(http, "/api/chat", {"ask": "Check it.", "stream": True}, headers={"Last-Event-ID": ids[-1]})
                == []
            )
    # The reconnects asked nothing new.
    (obj,) = conversations(api_client, namespace)
    assert len(obj["spec"]["turns"]) == 1


def test_keepalives_never_reach_the_documented_client_as_a_message(
    stack: Any, model_server: Any, scenario_name: str
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="Slow answer.", latency_ms=1500)]))
    s = stack(scenario_name, keepalive=0.05)
    with s.client() as http:
        response = http.post("/api/chat", json={"ask": "Take your time.", "stream": True})
    assert response.status_code == 200
    assert b": keep-alive" in response.content  # they were sent, while the model thought
    messages = fetch_event_source_messages(response.content)
    assert [m["event"] for m in messages] == ["ai_message", "token_count", "ai_answer_end"]
    for message in messages:  # what `JSON.parse(event.data)` does in the documented client
        assert isinstance(json.loads(message["data"]), dict)


def test_a_client_that_disconnects_does_not_cancel_the_run(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    fact = unique("fact")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="Looking.", tool_calls=[probe("p-1", namespace, fact)]),
                Step(content="Finished without you.", latency_ms=1000),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http, connect_sse(http, "POST", "/api/chat", json={"ask": "Go.", "stream": True}) as source:
        first = next(source.iter_sse())
        assert first.event == "ai_message"
        name = first.id.split("/")[1]
    done = wait_conv(api_client, namespace, name, all_answered(1))
    assert done["status"]["turns"][0]["answer"] == "Finished without you."
    assert count_effects(api_client, namespace, PROBE_LABEL, fact) == 1


def test_behavior_controls_and_additional_system_prompt_shape_the_prompts(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="One."), Step(content="Two.")]))
    s = stack(scenario_name)
    with s.client() as http:
        first = http.post(
            "/api/chat",
            json={
                "ask": "Hi",
                "behavior_controls": {"intro": False, "style_guide": False},
                "additional_system_prompt": "Always answer in haiku.",
            },
        ).json()
        second = http.post(
            "/api/chat",
            json={
                "ask": "Again",
                "conversation_history": first["conversation_history"],
                "behavior_controls": {"todowrite_reminder": False},
            },
        )
        assert second.status_code == 200, second.text
    system = model_server.requests(scenario_name)[0]["messages"][0]["content"]
    assert "Always answer in haiku." in system
    assert "You are Lestrade" not in system and "Answer style:" not in system
    conv = conversations(api_client, namespace)[0]
    assert conv["spec"]["systemPrompt"] == "Always answer in haiku."
    assert conv["spec"]["behaviorControls"] == {"todowrite_reminder": False}  # replaced, not merged


def test_response_format_makes_the_analysis_a_json_string_of_the_schema(
    stack: Any, model_server: Any, scenario_name: str
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="# is_healthy\ntrue\n# summary\nAll nodes are ready."),
                Step(content="Plain again."),
            ],
        )
    )
    s = stack(scenario_name)
    schema = {
        "type": "json_schema",
        "json_schema": {
            "name": "ClusterHealthResult",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"is_healthy": {"type": "string"}, "summary": {"type": "string"}},
                "required": ["is_healthy", "summary"],
                "additionalProperties": False,
            },
        },
    }
    with s.client() as http:
        body = http.post("/api/chat", json={"ask": "Is the cluster healthy?", "response_format": schema}).json()
        assert json.loads(body["analysis"]) == {"is_healthy": "true", "summary": "All nodes are ready."}
        # The next request without response_format gets prose again.
        plain = http.post("/api/chat", json={"ask": "And now?", "conversation_history": body["conversation_history"]})
        assert plain.json()["analysis"] == "Plain again."
    first, second = model_server.requests(scenario_name)
    assert first["response_format"]["json_schema"]["name"] == "ClusterHealthResult"
    assert "response_format" not in second


HEALTH_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "ClusterHealthResult",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"is_healthy": {"type": "boolean"}, "summary": {"type": "string"}},
            "required": ["is_healthy", "summary"],
            "additionalProperties": False,
        },
    },
}


def test_a_model_without_structured_output_is_asked_in_words_and_its_answer_checked(
    stack: Any, model_server: Any, scenario_name: str
) -> None:
    # A provider that ignores response_format: its first answer is prose, then (told what was
    # wrong) a fenced object. The client gets the bare object the schema describes.
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            ignores_response_format=True,
            steps=[
                Step(content="All nodes look ready to me."),
                Step(content='Here it is:\n```json\n{"is_healthy": true, "summary": "All nodes are ready."}\n```'),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        response = http.post("/api/chat", json={"ask": "Is the cluster healthy?", "response_format": HEALTH_SCHEMA})
    assert response.status_code == 200, response.text
    assert json.loads(response.json()["analysis"]) == {"is_healthy": True, "summary": "All nodes are ready."}
    first, second = model_server.requests(scenario_name)
    # asked in words with every call (the provider's table says it has no structured output)
    asked = first["messages"][-1]
    assert asked["role"] == "user" and "JSON Schema" in asked["content"] and '"is_healthy"' in asked["content"]
    # the prose answer was refused with the reason, once
    notes = [m["content"] for m in second["messages"] if m["role"] == "user" and "rejected" in str(m["content"])]
    assert len(notes) == 1 and "not JSON" in notes[0], notes
    assert second["messages"][-1]["content"] == asked["content"]


def test_a_structured_answer_that_breaks_the_schema_gets_one_corrective_step(
    stack: Any, model_server: Any, scenario_name: str
) -> None:
    # A string where the schema says boolean: the model is told which field, and its second
    # answer stands (one correction, not a loop).
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            ignores_response_format=True,
            steps=[Step(content='{"is_healthy": "yes", "summary": "fine"}')],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        response = http.post("/api/chat", json={"ask": "Healthy?", "response_format": HEALTH_SCHEMA})
    assert response.status_code == 200, response.text
    assert json.loads(response.json()["analysis"]) == {"is_healthy": "yes", "summary": "fine"}
    first, second = model_server.requests(scenario_name)
    (note,) = [m["content"] for m in second["messages"] if m["role"] == "user" and "rejected" in str(m["content"])]
    assert "is_healthy" in note and "boolean" in note, note


def test_a_reconnect_while_the_run_goes_on_gets_exactly_the_rest_live(
    stack: Any, model_server: Any, scenario_name: str, namespace: str
) -> None:
    fact = unique("fact")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="Let me look.", tool_calls=[probe("p-1", namespace, fact)]),
                Step(content="Found it.", latency_ms=2000),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        with connect_sse(http, "POST", "/api/chat", json={"ask": "Look.", "stream": True}) as source:
            seen = []
            for event in source.iter_sse():
                seen.append(event)
                if event.event == "tool_calling_result":
                    break  # the client drops while the model is still thinking
        name = seen[0].id.split("/")[1]
        rest = sse_events(http, "/api/chat", {"ask": "Look.", "stream": True}, headers={"Last-Event-ID": seen[-1].id})
        assert rest[-1].event == "ai_answer_end"
        assert json.loads(rest[-1].data)["analysis"] == "Found it."
        # The whole stream, replayed from before its first event, is the two parts joined.
        turn_start = int(seen[0].id.split("/")[2].split(".")[0]) - 1
        whole = sse_events(
            http, "/api/chat", {"ask": "Look.", "stream": True}, headers={"Last-Event-ID": f"conv/{name}/{turn_start}"}
        )
    assert [(e.event, e.id, e.data) for e in whole] == [(e.event, e.id, e.data) for e in seen + rest]


def test_a_stream_whose_conversation_is_deleted_ends_with_an_error(
    stack: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    from kubernetes import client as k8s

    s = stack(scenario_name, operator=False, keepalive=0.05)  # nobody answers: the stream waits
    with s.client() as http, connect_sse(http, "POST", "/api/chat", json={"ask": "Hello?", "stream": True}) as source:
        (conv,) = conversations(api_client, namespace)
        k8s.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            "lestrade.dev", "v1alpha1", namespace, "conversations", conv["metadata"]["name"]
        )
        events = list(source.iter_sse())
    assert [e.event for e in events] == ["error"]
    error = json.loads(events[0].data)
    assert error["success"] is False and error["error_code"] == 1 and "deleted" in error["msg"]


def test_images_go_to_the_model_as_content_parts(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="A cat.")]))
    s = stack(scenario_name)
    with s.client() as http:
        response = http.post(
            "/api/chat",
            json={
                "ask": "What is in these images?",
                "images": [
                    "https://example.com/before.png",
                    {"url": "https://example.com/after.png", "detail": "high"},
                ],
            },
        )
    assert response.status_code == 200, response.text
    (request,) = model_server.requests(scenario_name)
    content = request["messages"][-1]["content"]
    assert content[0]["type"] == "text" and "What is in these images?" in content[0]["text"]
    assert [p["image_url"] for p in content[1:]] == [
        {"url": "https://example.com/before.png"},
        {"url": "https://example.com/after.png", "detail": "high"},
    ]
    assert response.json()["analysis"] == "A cat."
