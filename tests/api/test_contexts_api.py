"""The context store `/v1` (reference 004) over real HTTP on the real apiserver: every context
is a Conversation, its log the transcript, its window the operator's window code."""

from __future__ import annotations

from typing import Any

import httpx
from apikit import serve
from convkit import all_answered, ask, create_conv, get_conv, wait_conv

from lestrade.api.app import create_app
from lestrade.modelserver import Scenario, Step, ToolCall


def text(t: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t}]


def append(http: httpx.Client, cid: str, role: str, t: str, **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {"message": {"role": role, "parts": text(t), **extra.pop("message", {})}, **extra}
    return http.post(f"/v1/contexts/{cid}/messages", json=body)


def test_a_context_is_created_read_updated_and_tombstoned(
    stack: Any, scenario_name: str, api_client: Any, namespace: str
) -> None:
    s = stack(scenario_name, operator=False)
    with s.client() as http:
        created = http.put(
            "/v1/contexts/support-123",
            json={
                "token_budget": 1000000,
                "policy": {"strategy": "last_n", "config": {"limit": 400}},
                "metadata": {"project": "support"},
            },
        )
        assert created.status_code == 200, created.text
        body = created.json()
        assert body["id"] == "support-123" and body["token_budget"] == 1000000
        assert body["trigger_ratio"] == 0.7  # the documented default
        assert body["policy"] == {"strategy": "last_n", "config": {"limit": 400}}
        assert body["metadata"] == {"project": "support"}
        assert body["version"] == 0 and body["created_at"].endswith("Z") and body["updated_at"]
        # It is a Conversation, with the settings in spec.context.
        conv = get_conv(api_client, namespace, "support-123")
        assert conv["spec"]["context"]["compaction"] == {"policy": "last_n", "limit": 400}
        assert conv["spec"]["context"]["metadata"] == {"project": "support"}
        # PUT again replaces the settings (idempotent), keeps the log.
        assert append(http, "support-123", "user", "hello").status_code == 200
        again = http.put("/v1/contexts/support-123", json={"token_budget": 5000, "trigger_ratio": 0.5})
        assert again.status_code == 200, again.text
        assert again.json()["policy"] is None and again.json()["metadata"] == {}
        assert again.json()["trigger_ratio"] == 0.5 and again.json()["version"] == 1
        got = http.get("/v1/contexts/support-123").json()
        assert got["token_budget"] == 5000 and got["version"] == 1
        # Metadata is upserted.
        patched = http.patch("/v1/contexts/support-123/metadata", json={"metadata": {"customer": "acme-corp"}})
        assert patched.status_code == 200, patched.text
        patched = http.patch("/v1/contexts/support-123/metadata", json={"metadata": {"priority": "gold"}})
        assert http.get("/v1/contexts/support-123").json()["metadata"] == {"customer": "acme-corp", "priority": "gold"}
        # DELETE tombstones: messages stay readable, appends are refused with 409.
        deleted = http.delete("/v1/contexts/support-123")
        assert deleted.status_code == 200, deleted.text
        refused = append(http, "support-123", "user", "again")
        assert refused.status_code == 409
        assert refused.json()["error"] == "context_tombstoned"
        assert [m["parts"] for m in http.get("/v1/contexts/support-123/tail").json()["messages"]] == [text("hello")]
        assert http.put("/v1/contexts/support-123", json={}).json()["error"] == "context_tombstoned"
        assert http.patch("/v1/contexts/support-123/metadata", json={"metadata": {}}).status_code == 409
        compact = http.post(
            "/v1/contexts/support-123/compact", json={"replacement": [{"role": "user", "parts": text("x")}]}
        )
        assert compact.status_code == 409 and compact.json()["error"] == "context_tombstoned"


def test_the_tombstone_is_final_for_kubectl_too(
    stack: Any, scenario_name: str, api_client: Any, namespace: str
) -> None:
    from kubernetes import client as k8s

    s = stack(scenario_name, operator=False)
    with s.client() as http:
        assert http.put("/v1/contexts/closed", json={}).status_code == 200
        assert http.delete("/v1/contexts/closed").status_code == 200
    custom = k8s.CustomObjectsApi(api_client)
    for patch in ({"spec": {"tombstoned": False}}, {"spec": {"turns": [{"ask": "more?"}]}}):
        try:
            custom.patch_namespaced_custom_object(
                "lestrade.dev", "v1alpha1", namespace, "conversations", "closed", patch
            )
        except k8s.ApiException as exc:
            assert exc.status == 422 and "tombstoned" in exc.body
        else:
            raise AssertionError(f"{patch} was accepted on a tombstoned Conversation")


def test_appends_number_messages_and_if_version_guards(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, operator=False)
    with s.client() as http:
        http.put("/v1/contexts/demo", json={})
        first = http.post(
            "/v1/contexts/demo/messages",
            json={
                "message": {
                    "role": "assistant",
                    "parts": [
                        {"type": "text", "text": "Checking now…"},
                        {"type": "tool_call", "name": "lookup", "payload": {"sku": "A-19"}},
                    ],
                    "token_count": 128,
                    "metadata": {"reasoning": "User asked for availability."},
                },
                "if_version": 0,
            },
        )
        assert first.status_code == 200, first.text
        assert first.json() == {"seq": 1, "version": 1, "token_estimate": 128}
        second = append(http, "demo", "user", "and the other one?")
        assert second.json()["seq"] == 2 and second.json()["version"] == 2
        assert second.json()["token_estimate"] > 0  # computed when not given
        stale = append(http, "demo", "user", "late", if_version=1)
        assert stale.status_code == 409
        assert stale.json() == {"error": "conflict", "message": "Context version changed (expected 1, found 2)"}
        messages = http.get("/v1/contexts/demo/tail").json()["messages"]
        assert [m["seq"] for m in messages] == [1, 2]
        assert messages[0]["parts"][1] == {"type": "tool_call", "name": "lookup", "payload": {"sku": "A-19"}}
        assert messages[0]["metadata"] == {"reasoning": "User asked for availability."}
        assert messages[0]["token_count"] == 128 and messages[0]["inserted_at"].endswith("Z")
        assert http.get("/v1/contexts/demo").json()["version"] == 2


def test_errors_have_the_documented_shape(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, operator=False)
    with s.client() as http:
        missing = http.get("/v1/contexts/nope")
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
        for path in ("/v1/contexts/nope/tail", "/v1/contexts/nope/context"):
            assert http.get(path).status_code == 404
        assert append(http, "nope", "user", "x").status_code == 404
        assert http.delete("/v1/contexts/nope").status_code == 404
        assert http.patch("/v1/contexts/nope/metadata", json={"metadata": {}}).status_code == 404
        http.put("/v1/contexts/demo", json={})
        cases = [
            ("PUT", "/v1/contexts/Bad_Name", {}, "id"),
            ("PUT", "/v1/contexts/demo", {"trigger_ratio": 2}, "trigger_ratio"),
            ("PUT", "/v1/contexts/demo", {"policy": {"strategy": "fifo"}}, "policy.strategy"),
            ("PUT", "/v1/contexts/demo", {"policy": {"strategy": "skip_parts", "config": {"limit": 3}}}, "skipKinds"),
            ("PUT", "/v1/contexts/demo", {"token_budget": 0}, "token_budget"),
            (
                "PUT",
                "/v1/contexts/demo",
                {"policy": {"strategy": "skip_parts", "config": {"skip_kinds": [""]}}},
                "skip_kinds",
            ),
            ("POST", "/v1/contexts/demo/messages", {"message": {"role": "robot", "parts": text("x")}}, "message.role"),
            ("POST", "/v1/contexts/demo/messages", {"message": {"role": "user", "parts": []}}, "message.parts"),
            (
                "POST",
                "/v1/contexts/demo/messages",
                {"message": {"role": "user", "parts": text("x")}, "if_version": -1},
                "if_version",
            ),
            (
                "POST",
                "/v1/contexts/demo/messages",
                {"message": {"role": "user", "parts": [{"text": "no type"}]}},
                "type",
            ),
            ("POST", "/v1/contexts/demo/compact", {"replacement": []}, "replacement"),
            ("PATCH", "/v1/contexts/demo/metadata", {"metadata": "x"}, "metadata"),
        ]
        for method, path, body, field in cases:
            response = http.request(method, path, json=body)
            assert response.status_code == 400, (path, body, response.text)
            assert response.json()["error"] == "invalid_payload" and field in response.json()["message"], response.text
        bad_json = http.post("/v1/contexts/demo/messages", content=b"{", headers={"content-type": "application/json"})
        assert bad_json.status_code == 400 and bad_json.json()["error"] == "invalid_payload"
        for query in ("limit=0", "limit=abc", "offset=-1", "limit=100000"):
            response = http.get(f"/v1/contexts/demo/tail?{query}")
            assert response.status_code == 400 and response.json()["error"] == "invalid_payload", query
        assert http.get("/v1/contexts/demo/context?budget_tokens=0").status_code == 400
        huge = append(http, "demo", "user", "x" * 300_000)
        assert huge.status_code == 400 and "larger" in huge.json()["message"]


def test_health_endpoints(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, operator=False, auth=True)
    assert httpx.get(f"{s.base}/health/live").json() == {"status": "ok"}
    assert httpx.get(f"{s.base}/health/ready").json() == {"status": "ok"}
    unauthorized = httpx.get(f"{s.base}/v1/contexts/demo")
    assert unauthorized.status_code == 401 and unauthorized.json()["error"] == "unauthorized"


def test_ready_is_503_when_the_apiserver_cannot_be_reached(namespace: str) -> None:
    from kubernetes import client as k8s

    from lestrade.localcluster.cluster import free_port

    config = k8s.Configuration()
    config.host = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with serve(create_app(k8s.ApiClient(config), namespace=namespace)) as base:
        response = httpx.get(f"{base}/health/ready", timeout=30)
        assert response.status_code == 503
        assert response.json()["error"] == "unavailable"
        assert httpx.get(f"{base}/health/live").json() == {"status": "ok"}


def test_tail_pages_from_the_newest(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, operator=False)
    with s.client() as http:
        http.put("/v1/contexts/pages", json={})
        for i in range(1, 8):
            assert append(http, "pages", "user" if i % 2 else "assistant", f"m{i}").status_code == 200
        page = http.get("/v1/contexts/pages/tail?limit=3").json()["messages"]
        assert [m["seq"] for m in page] == [5, 6, 7]  # chronological within the page
        page = http.get("/v1/contexts/pages/tail?offset=3&limit=3").json()["messages"]
        assert [m["seq"] for m in page] == [2, 3, 4]
        page = http.get("/v1/contexts/pages/tail?offset=6&limit=3").json()["messages"]
        assert [m["seq"] for m in page] == [1]
        assert http.get("/v1/contexts/pages/tail?offset=7").json() == {"messages": []}


def test_compaction_replaces_the_window_and_keeps_the_log(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, operator=False)
    with s.client() as http:
        http.put("/v1/contexts/squash", json={"policy": {"strategy": "manual"}})
        for i in range(1, 5):
            append(http, "squash", "user", f"question {i}")
        window = http.get("/v1/contexts/squash/context").json()
        assert window["version"] == 4 and [m["seq"] for m in window["messages"]] == [1, 2, 3, 4]
        assert window["segments"] == [{"type": "live", "from_seq": 1, "to_seq": 4}]
        assert window["needs_compaction"] is False
        stale = http.post(
            "/v1/contexts/squash/compact", json={"replacement": [{"role": "user", "parts": text("s")}], "if_version": 3}
        )
        assert stale.status_code == 409 and stale.json()["error"] == "conflict"
        replacement = [
            {"role": "system", "parts": text("One-paragraph summary of prior context…")},
            {"role": "user", "parts": text("The most recent question.")},
        ]
        done = http.post("/v1/contexts/squash/compact", json={"replacement": replacement, "if_version": 4})
        assert done.status_code == 200, done.text
        assert done.json() == {"version": 5}
        append(http, "squash", "user", "question 5")
        window = http.get("/v1/contexts/squash/context?if_version=6").json()
        assert window["version"] == 6
        assert [(m["role"], m["parts"]) for m in window["messages"][:2]] == [
            (r["role"], r["parts"]) for r in replacement
        ]
        assert window["messages"][2]["seq"] == 5
        assert window["segments"] == [
            {"type": "summary", "from_seq": 1, "to_seq": 4},
            {"type": "live", "from_seq": 5, "to_seq": 5},
        ]
        # The raw log is untouched.
        assert [m["seq"] for m in http.get("/v1/contexts/squash/tail").json()["messages"]] == [1, 2, 3, 4, 5]
        changed = http.get("/v1/contexts/squash/context?if_version=5")
        assert changed.status_code == 409 and changed.json()["error"] == "conflict"


def test_the_window_after_each_policy(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, operator=False)
    word = "lorem ipsum dolor sit amet " * 20  # ~100 tokens a message
    with s.client() as http:
        for cid, policy in (
            ("lastn", {"strategy": "last_n", "config": {"limit": 3}}),
            ("skip", {"strategy": "skip_parts", "config": {"limit": 2, "skip_kinds": ["tool_result"]}}),
            ("manual", {"strategy": "manual"}),
        ):
            assert (
                http.put(
                    f"/v1/contexts/{cid}", json={"token_budget": 500, "trigger_ratio": 0.5, "policy": policy}
                ).status_code
                == 200
            )
            append(http, cid, "system", "You answer briefly.")
            for i in range(3):
                append(http, cid, "user", f"q{i} {word}")
                http.post(
                    f"/v1/contexts/{cid}/messages",
                    json={
                        "message": {
                            "role": "assistant",
                            "parts": [{"type": "tool_call", "id": f"c{i}", "name": "lookup", "payload": {"i": i}}],
                        }
                    },
                )
                http.post(
                    f"/v1/contexts/{cid}/messages",
                    json={
                        "message": {
                            "role": "tool",
                            "parts": [{"type": "tool_result", "tool_call_id": f"c{i}", "output": word}],
                        }
                    },
                )
        # last_n: system prompt, the latest ask, and the 3 newest messages.
        window = http.get("/v1/contexts/lastn/context").json()
        assert [m["seq"] for m in window["messages"]] == [1, 8, 9, 10]
        assert window["segments"] == [
            {"type": "live", "from_seq": 1, "to_seq": 1},
            {"type": "live", "from_seq": 8, "to_seq": 10},
        ]
        # The budget override: with room enough, nothing is dropped.
        roomy = http.get("/v1/contexts/lastn/context?budget_tokens=100000").json()
        assert [m["seq"] for m in roomy["messages"]] == list(range(1, 11)) and roomy["budget_tokens"] == 100000
        assert roomy["needs_compaction"] is False
        # skip_parts: older tool results are replaced by a note; the 2 newest stay whole.
        window = http.get("/v1/contexts/skip/context").json()
        assert [m["seq"] for m in window["messages"]] == list(range(1, 11))
        results = [m for m in window["messages"] if m["role"] == "tool"]
        assert [r["parts"][0]["output"].startswith("[lestrade]") for r in results] == [True, True, False]
        assert window["used_tokens"] < roomy["used_tokens"]
        # manual: nothing changes, and the window says it needs compacting.
        window = http.get("/v1/contexts/manual/context").json()
        assert [m["seq"] for m in window["messages"]] == list(range(1, 11))
        assert window["needs_compaction"] is True and window["used_tokens"] > 250


def test_turns_and_stored_messages_share_one_log(
    stack: Any, model_server: Any, scenario_name: str, api_client: Any, namespace: str
) -> None:
    """A Conversation made with kubectl reads as a context; a message stored through /v1 is not
    answered; a turn asked afterwards lands in the same log, after it, with the next seq."""
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="First answer."),
                Step(content="Second answer."),
            ],
        )
    )
    s = stack(scenario_name)
    create_conv(api_client, namespace, "kubectl-made", "What is up?", model=scenario_name)
    wait_conv(api_client, namespace, "kubectl-made", all_answered(1))
    with s.client() as http:
        context = http.get("/v1/contexts/kubectl-made").json()
        assert context["version"] == 3 and context["policy"] is None  # system, user, assistant
        log = http.get("/v1/contexts/kubectl-made/tail").json()["messages"]
        assert [m["role"] for m in log] == ["system", "user", "assistant"]
        assert log[2]["parts"] == text("First answer.") and log[1]["inserted_at"]
        stored = append(http, "kubectl-made", "user", "A note for later.", if_version=3)
        assert stored.json() == {"seq": 4, "version": 4, "token_estimate": stored.json()["token_estimate"]}
        conv = get_conv(api_client, namespace, "kubectl-made")
        assert len(conv["spec"]["turns"]) == 1 and conv["status"]["phase"] == "Answered"
        ask(api_client, namespace, "kubectl-made", "And now?")
        wait_conv(api_client, namespace, "kubectl-made", all_answered(2))
        log = http.get("/v1/contexts/kubectl-made/tail").json()["messages"]
        assert [m["seq"] for m in log] == list(range(1, len(log) + 1))
        assert log[3]["parts"] == text("A note for later.")
        assert [m["role"] for m in log[4:]] == ["user", "assistant"] and log[-1]["parts"] == text("Second answer.")
        # The stored note reached the model with the second turn.
        request = model_server.requests(scenario_name)[-1]
        assert any("A note for later." in str(m.get("content")) for m in request["messages"])


def test_a_turn_after_stored_messages_gets_the_system_prompt(
    stack: Any, model_server: Any, scenario_name: str, api_client: Any, namespace: str
) -> None:
    """A context made through /v1 whose first turn comes later (kubectl): the operator still
    gives the model its system prompt, after the stored messages it also gives it."""
    fix = ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": scenario_name})
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                # The scripted server plays step n for a request holding n assistant messages; the
                # stored "Noted." is one.
                Step(content="(not played)"),
                Step(content="Answered."),
                Step(tool_calls=[fix]),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        assert http.put("/v1/contexts/later", json={}).status_code == 200
        assert append(http, "later", "user", "Remember: the SKU is A-19.").status_code == 200
        assert append(http, "later", "assistant", "Noted.").status_code == 200
        conv = get_conv(api_client, namespace, "later")
        assert conv.get("status", {}).get("turns", []) == []  # stored, not answered
        ask(api_client, namespace, "later", "What is the SKU?")
        wait_conv(api_client, namespace, "later", all_answered(1))
        sent = model_server.requests(scenario_name)[-1]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "system", "user"]
        assert "Remember: the SKU is A-19." in sent[0]["content"] and "What is the SKU?" in sent[-1]["content"]
        log = http.get("/v1/contexts/later/tail").json()["messages"]
        assert [m["seq"] for m in log] == [1, 2, 3, 4, 5] and log[-1]["parts"] == text("Answered.")
        assert http.get("/v1/contexts/later").json()["version"] == 5
        # While a turn is being answered (here: waiting for approval), appends are refused.
        ask(api_client, namespace, "later", "Fix it.")
        wait_conv(api_client, namespace, "later", lambda o: (o.get("status") or {}).get("phase") == "AwaitingApproval")
        busy = append(http, "later", "user", "meanwhile")
        assert busy.status_code == 409 and busy.json()["error"] == "conflict" and "turn" in busy.json()["message"]
        assert (
            http.post(
                "/v1/contexts/later/compact", json={"replacement": [{"role": "user", "parts": text("s")}]}
            ).status_code
            == 409
        )
