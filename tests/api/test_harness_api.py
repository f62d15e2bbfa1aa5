"""Reference 003 over real HTTP, with the real operator on the real control plane: `POST /chat`
streams a harness session's events; tool calls are decided by the permission rules or relayed
and answered with `POST /chat/relay/:relayId` (or kubectl); the `agent` tool runs subagents.
Effects are counted in the cluster (ConfigMaps the test tools leave), not taken from events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from opkit import EFFECT_LABEL, PROBE_LABEL, count_effects, install_policy

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall

Event = tuple[str, dict[str, Any]]


def probe(namespace: str, tag: str, call_id: str) -> ToolCall:
    return ToolCall(id=call_id, name="slow_probe", arguments={"namespace": namespace, "tag": tag})


def fix(namespace: str, tag: str, call_id: str) -> ToolCall:
    return ToolCall(id=call_id, name="apply_fix", arguments={"namespace": namespace, "tag": tag})


class Session:
    """One POST /chat stream, read event by event (so the test can answer relays mid-stream)."""

    def __init__(self, http: httpx.Client, body: dict[str, Any]) -> None:
        self._context = connect_sse(http, "POST", "/chat", json=body)
        source = self._context.__enter__()
        assert source.response.status_code == 200, source.response.read()
        self._events: Iterator[Any] = source.iter_sse()
        self.seen: list[Event] = []

    def next(self) -> Event:
        raw = next(self._events)
        event = (raw.event, json.loads(raw.data))
        self.seen.append(event)
        return event

    def until(self, predicate: Any) -> list[Event]:
        """Reads until predicate(events read so far) holds; returns them."""
        while not predicate(self.seen):
            self.next()
        return self.seen

    def rest(self) -> list[Event]:
        for raw in self._events:
            self.seen.append((raw.event, json.loads(raw.data)))
        self._context.__exit__(None, None, None)
        return self.seen

    @property
    def id(self) -> str:
        return self.seen[0][1]["sessionId"]


def relays(events: list[Event]) -> list[dict[str, Any]]:
    return [data for name, data in events if name == "relay"]


def names(events: list[Event]) -> list[str]:
    return [name for name, _ in events]


def answer(http: httpx.Client, session: str, relay: str, **response: Any) -> httpx.Response:
    return http.post(f"/chat/relay/{relay}", json={"sessionId": session, "response": response})


def test_event_order_fields_and_allowlist_glob(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[probe(namespace, "a1", "p-1")], reasoning="Probe first."),
                Step(content="All good."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        session = Session(
            http,
            {
                "model": scenario_name,
                "messages": [{"role": "user", "content": "Is it fine?"}],
                "permissions": {"allowlist": [{"tool": "slow_probe", "params": {"tag": "a*"}}]},
                "maxIterations": 5,
            },
        )
        events = session.rest()
    assert names(events) == [
        "connected",
        "harness_start",
        "reasoning",
        "tool_call",
        "tool_result",
        "usage",
        "text",
        "usage",
        "harness_end",
    ]
    reasoning = events.pop(2)[1]
    assert reasoning["content"] == "Probe first." and reasoning["agentId"] == "main" and reasoning["id"]
    sid = events[0][1]["sessionId"]
    assert events[0][1] == {"type": "connected", "sessionId": sid}
    run = f"{sid}/0"
    for name, data in events[1:]:
        assert data["type"] == name and data["runId"] == run and data["agentId"] == "main", data
        assert "parentId" not in data
    assert events[1][1]["maxIterations"] == 5 and events[1][1]["depth"] == 0
    assert events[2][1] == {
        "type": "tool_call",
        "runId": run,
        "agentId": "main",
        "id": "p-1",
        "name": "slow_probe",
        "input": {"namespace": namespace, "tag": "a1"},
    }
    assert events[3][1]["id"] == "p-1" and events[3][1]["name"] == "slow_probe"
    assert events[3][1]["output"] == "probe a1: all good"
    assert events[5][1]["content"] == "All good."
    usage = events[4][1]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    end = events[-1][1]
    assert end["reason"] == "final" and end["iterations"] == 2
    assert end["usage"]["inputTokens"] == usage["inputTokens"] + events[6][1]["inputTokens"]
    assert count_effects(api_client, namespace, PROBE_LABEL, "a1") == 1  # ran without a relay
    conv = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "conversations", sid
    )
    assert conv["spec"]["harness"]["permissions"]["allowlist"][0]["tool"] == "slow_probe"


def test_deny_allow_once_and_glob_mismatch(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        probe(namespace, "a", "p-1"),
                        probe(namespace, "b", "p-2"),
                        probe(namespace, "c", "p-3"),
                    ]
                ),
                Step(content="Done."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        session = Session(
            http,
            {
                "model": scenario_name,
                "messages": [{"role": "user", "content": "Probe."}],
                "permissions": {
                    "allowOnce": [{"tool": "slow_probe"}],
                    "allowlist": [{"tool": "slow_probe", "params": {"tag": "zzz*"}}],
                    "deny": [{"toolCallId": "p-3", "reason": "not that one"}],
                },
            },
        )
        session.until(lambda seen: relays(seen))
        [relay] = relays(session.seen)
        # p-1 took the allowOnce, p-2 matched no rule (the glob does not match "b"), p-3 is denied.
        assert relay["toolCallId"] == "p-2" and relay["id"] == "p-2" and relay["kind"] == "permission"
        assert relay["tool"] == "slow_probe" and relay["params"] == {"namespace": namespace, "tag": "b"}
        assert relay["agentId"] == "main" and relay["runId"] == f"{session.id}/0"
        response = answer(http, session.id, "p-2", approved=False, reason="not now")
        assert response.status_code == 200 and response.json() == {"success": True}
        events = session.rest()
    results = {d["id"]: d["output"] for n, d in events if n == "tool_result"}
    assert results["p-1"] == "probe a: all good"
    assert results["p-2"] == {"status": "denied", "reason": "not now"}
    assert results["p-3"] == {"status": "denied", "reason": "not that one"}
    assert events[-1][0] == "harness_end" and events[-1][1]["reason"] == "final"
    assert [count_effects(api_client, namespace, PROBE_LABEL, t) for t in "abc"] == [1, 0, 0]


def test_relay_always_adds_a_rule_and_the_next_call_runs_without_relay(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix(namespace, "t1", "f-1")]),
                Step(tool_calls=[fix(namespace, "t2", "f-2")]),
                Step(content="Fixed twice."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        session = Session(http, {"model": scenario_name, "messages": [{"role": "user", "content": "Fix."}]})
        session.until(lambda seen: relays(seen))
        assert count_effects(api_client, namespace, EFFECT_LABEL, "t1") == 0  # waits for the relay
        assert answer(http, session.id, "f-1", approved=True, always=True).json() == {"success": True}
        events = session.rest()
    assert [r["toolCallId"] for r in relays(events)] == ["f-1"]  # f-2 ran under the derived rule
    assert events[-1][1]["reason"] == "final"
    assert count_effects(api_client, namespace, EFFECT_LABEL, "t1") == 1
    assert count_effects(api_client, namespace, EFFECT_LABEL, "t2") == 1
    conv = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "conversations", session.id
    )
    assert conv["spec"]["harness"]["permissions"]["allowlist"] == [{"tool": "apply_fix"}]
    assert conv["spec"]["decisions"] == {"f-1": {"approved": True}}


def test_relay_races_with_kubectl_first_decision_wins(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix(namespace, "k", "f-1"), fix(namespace, "h", "f-2")]),
                Step(content="Done."),
            ],
        )
    )
    install_policy(api_client, namespace)  # the decisions admission policy, as the chart has it
    s = stack(scenario_name)
    api = k8s.CustomObjectsApi(api_client)

    def kubectl_decide(name: str, call: str, approved: bool) -> None:
        api.patch_namespaced_custom_object(
            "lestrade.dev",
            "v1alpha1",
            namespace,
            "conversations",
            name,
            {"spec": {"decisions": {call: {"approved": approved}}}},
        )

    with s.client() as http:
        session = Session(http, {"model": scenario_name, "messages": [{"role": "user", "content": "Fix."}]})
        session.until(lambda seen: len(relays(seen)) == 2)
        # kubectl first, then the API: the API's answer is the conflict. (kubectl, like the API,
        # can decide once status lists the relays: the admission policy reads status.)
        wait_until(
            "status lists both relays",
            lambda: (
                {
                    p["toolCallId"]
                    for p in api.get_namespaced_custom_object(
                        "lestrade.dev",
                        "v1alpha1",
                        namespace,
                        "conversations",
                        session.id,
                    )
                    .get("status", {})
                    .get("pendingApprovals")
                    or []
                }
                == {"f-1", "f-2"}
            ),
            60,
        )
        kubectl_decide(session.id, "f-1", False)
        late = answer(http, session.id, "f-1", approved=True)
        assert late.status_code == 409 and "already decided: denied" in late.json()["error"]
        # The API first, then kubectl: kubectl is refused by the admission policy.
        assert answer(http, session.id, "f-2", approved=True).json() == {"success": True}
        with pytest.raises(ApiException) as refused:
            kubectl_decide(session.id, "f-2", False)
        assert "already decided" in refused.value.body
        events = session.rest()
    results = {d["id"]: d["output"] for n, d in events if n == "tool_result"}
    assert results["f-1"]["status"] == "denied" and results["f-2"] == "fix h applied"
    assert count_effects(api_client, namespace, EFFECT_LABEL, "k") == 0
    assert count_effects(api_client, namespace, EFFECT_LABEL, "h") == 1


def test_subagents_run_concurrently_and_carry_parent_and_depth(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(id="spawn-a", name="agent", arguments={"task": "TASK-A check"}),
                        ToolCall(id="spawn-b", name="agent", arguments={"task": "TASK-B check"}),
                    ]
                ),
                Step(content="Both children reported."),
            ],
            rules=[
                {
                    "when": {"last_user_contains": "TASK-A", "any_message_contains": "fix A applied"},
                    "respond": {"content": "A is fixed"},
                },
                {
                    "when": {"last_user_contains": "TASK-A"},
                    "respond": {"tool_calls": [fix(namespace, "A", "fa").model_dump()]},
                },
                {
                    "when": {"last_user_contains": "TASK-B", "any_message_contains": "fix B applied"},
                    "respond": {"content": "B is fixed"},
                },
                {
                    "when": {"last_user_contains": "TASK-B"},
                    "respond": {"tool_calls": [fix(namespace, "B", "fb").model_dump()]},
                },
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        session = Session(
            http,
            {
                "model": scenario_name,
                "messages": [{"role": "user", "content": "Split the work."}],
                "permissions": {"allowlist": [{"tool": "agent"}]},
            },
        )
        # Rendezvous: each child waits on its own relay, and both relays are out before either
        # is answered — serial children would never show the second one.
        session.until(lambda seen: len(relays(seen)) == 2)
        pending = {r["params"]["tag"]: r for r in relays(session.seen)}
        assert set(pending) == {"A", "B"} and {r["tool"] for r in pending.values()} == {"apply_fix"}
        assert (pending["A"]["parentId"], pending["B"]["parentId"]) == ("spawn-a", "spawn-b")
        for relay in pending.values():
            assert relay["depth"] == 1 and relay["agentId"] == f"agent-{relay['parentId']}"
        # A relay pauses only its own agent: B runs to its end while A still waits.
        assert answer(http, session.id, pending["B"]["id"], approved=True).status_code == 200
        session.until(lambda seen: any(n == "harness_end" and d["agentId"] == "agent-spawn-b" for n, d in seen))
        assert not any(n == "harness_end" and d["agentId"] == "agent-spawn-a" for n, d in session.seen)
        assert count_effects(api_client, namespace, EFFECT_LABEL, "A") == 0
        assert answer(http, session.id, pending["A"]["id"], approved=True).status_code == 200
        events = session.rest()
    starts = [d for n, d in events if n == "harness_start"]
    assert [(d["agentId"], d.get("parentId"), d["depth"]) for d in starts][0] == ("main", None, 0)
    assert sorted((d["agentId"], d["parentId"], d["depth"]) for d in starts[1:]) == [
        ("agent-spawn-a", "spawn-a", 1),
        ("agent-spawn-b", "spawn-b", 1),
    ]
    child_ends = [d for n, d in events if n == "harness_end" and d["agentId"] != "main"]
    assert sorted(d["reason"] for d in child_ends) == ["final", "final"]
    results = {d["id"]: d["output"] for n, d in events if n == "tool_result" and d["agentId"] == "main"}
    assert results == {"spawn-a": "A is fixed", "spawn-b": "B is fixed"}
    child_texts = {d["agentId"]: d["content"] for n, d in events if n == "text" and d["agentId"] != "main"}
    assert child_texts == {"agent-spawn-a": "A is fixed", "agent-spawn-b": "B is fixed"}
    assert events[-1][0] == "harness_end" and events[-1][1]["agentId"] == "main"
    assert count_effects(api_client, namespace, EFFECT_LABEL, "A") == 1
    assert count_effects(api_client, namespace, EFFECT_LABEL, "B") == 1


def test_nested_subagents_stop_at_max_depth(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[ToolCall(id="s1", name="agent", arguments={"task": "LEVEL-1"})]),
                Step(content="Top done."),
            ],
            rules=[
                {
                    "when": {"last_user_contains": "LEVEL-2", "any_message_contains": "depth limit is reached"},
                    "respond": {"content": "level 2 could not go deeper"},
                },
                {
                    "when": {"last_user_contains": "LEVEL-2"},
                    "respond": {"tool_calls": [{"id": "s3", "name": "agent", "arguments": {"task": "LEVEL-3"}}]},
                },
                {
                    "when": {"last_user_contains": "LEVEL-1", "any_message_contains": "could not go deeper"},
                    "respond": {"content": "level 1 done"},
                },
                {
                    "when": {"last_user_contains": "LEVEL-1"},
                    "respond": {"tool_calls": [{"id": "s2", "name": "agent", "arguments": {"task": "LEVEL-2"}}]},
                },
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        events = Session(
            http,
            {
                "model": scenario_name,
                "messages": [{"role": "user", "content": "Go deep."}],
                "permissions": {"allowlist": [{"tool": "agent"}]},
                "maxDepth": 2,
            },
        ).rest()
    starts = [(d["agentId"], d.get("parentId"), d["depth"]) for n, d in events if n == "harness_start"]
    assert starts == [("main", None, 0), ("agent-s1", "s1", 1), ("agent-s2", "s2", 2)]
    refused = [d for n, d in events if n == "tool_result" and d["id"] == "s3"]
    assert refused == [
        {
            "type": "tool_result",
            "runId": refused[0]["runId"],
            "agentId": "agent-s2",
            "parentId": "s2",
            "depth": 2,
            "id": "s3",
            "name": "agent",
            "output": {"error": "cannot spawn a subagent: the depth limit is reached (maxDepth 2)"},
        }
    ]
    results = {d["id"]: d["output"] for n, d in events if n == "tool_result"}
    assert results["s2"] == "level 2 could not go deeper" and results["s1"] == "level 1 done"
    assert events[-1][1]["reason"] == "final" and events[-1][1]["agentId"] == "main"


def test_max_iterations_ends_the_run(stack: Any, model_server: Any, scenario_name: str, namespace: str) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[Step(tool_calls=[ToolCall(name="slow_probe", arguments={"namespace": namespace, "tag": "loop"})])],
            rules=[{"when": {"last_user_contains": "used all the steps"}, "respond": {"content": "best effort"}}],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        events = Session(
            http,
            {
                "model": scenario_name,
                "messages": [{"role": "user", "content": "Loop."}],
                "permissions": {"allowlist": [{"tool": "slow_probe"}]},
                "maxIterations": 2,
            },
        ).rest()
    assert names(events).count("tool_call") == 1  # the second iteration was told to answer
    assert events[-1][0] == "harness_end"
    assert events[-1][1]["reason"] == "max_iterations" and events[-1][1]["iterations"] == 2


def test_bad_requests_and_unknown_ids(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="hi")]))
    s = stack(scenario_name, operator=False)
    with s.client() as http:
        bad = http.post("/chat", content=b"{not json", headers={"Content-Type": "application/json"})
        assert (bad.status_code, bad.json()) == (400, {"error": "Invalid JSON body"})
        missing = http.post("/chat", json={"model": scenario_name})
        assert (missing.status_code, missing.json()) == (400, {"error": "model and messages are required"})
        other = http.post("/chat", json={"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "x"}]})
        assert other.status_code == 400
        assert other.json()["error"] == (
            f"model 'openai/gpt-4o' is not allowed; allowed: openai/{scenario_name}, {scenario_name} (or default: {scenario_name})"
        )
        depth = http.post(
            "/chat", json={"model": scenario_name, "messages": [{"role": "user", "content": "x"}], "maxDepth": 9}
        )
        assert depth.status_code == 400 and depth.json()["error"].startswith("maxDepth:")
        relay_bad = http.post("/chat/relay/x", content=b"[", headers={"Content-Type": "application/json"})
        assert (relay_bad.status_code, relay_bad.json()) == (400, {"error": "Invalid JSON body"})
        relay_missing = http.post("/chat/relay/x", json={"sessionId": "s"})
        assert (relay_missing.status_code, relay_missing.json()) == (
            400,
            {"error": "sessionId and response are required"},
        )
        for session_id in ("harness-nope", "../../../../api/v1/namespaces/default/secrets/x", "Not_A_Name"):
            nobody = answer(http, session_id, "x", approved=True)
            assert (nobody.status_code, nobody.json()) == (404, {"error": "Session not found"}), session_id
        # A real session (created by the API; no operator runs it here) but an unknown relay.
        with connect_sse(
            http,
            "POST",
            "/chat",
            json={
                "model": f"openai/{scenario_name}",
                "messages": [{"role": "user", "content": "x"}],
            },
        ) as source:
            first = next(source.iter_sse())
            session = json.loads(first.data)["sessionId"]
        unknown = answer(http, session, "no-such-relay", approved=True)
        assert (unknown.status_code, unknown.json()) == (404, {"error": "Relay not found"})


def test_sessions_and_relays_are_written_as_the_caller(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any, cluster: Any
) -> None:
    from lestrade.testing.rbac import grant_lestrade_role as grant

    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix(namespace, "auth", "f-1")]),
                Step(content="Fixed."),
            ],
        )
    )
    gate = ("investigations", ["create"])  # what every API call needs (auth.py)
    grant(api_client, namespace, "asker", [gate, ("conversations", ["create", "get"])])
    grant(api_client, namespace, "approver", [gate, ("conversations", ["get", "patch"])])
    s = stack(scenario_name, auth=True)
    asker = {"Authorization": f"Bearer {cluster.token_for(namespace, 'asker')}"}
    approver = {"Authorization": f"Bearer {cluster.token_for(namespace, 'approver')}"}
    body = {"model": scenario_name, "messages": [{"role": "user", "content": "Fix."}]}
    with s.client() as http:
        assert http.post("/chat", json=body).status_code == 401
        for headers in (asker, approver):
            wait_until("RBAC to allow", lambda h=headers: http.get("/api/model", headers=h).status_code == 200, 30)
        refused = http.post("/chat", headers=approver, json=body)
        assert refused.status_code == 403
        assert f"system:serviceaccount:{namespace}:approver may not create conversations" in refused.json()["error"]
        http.headers.update(asker)
        session = Session(http, body)
        session.until(lambda seen: relays(seen))
        conv = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
            "lestrade.dev", "v1alpha1", namespace, "conversations", session.id
        )
        assert (
            conv["metadata"]["annotations"]["lestrade.dev/requested-by"] == f"system:serviceaccount:{namespace}:asker"
        )
        with s.client() as other:
            denied = other.post(
                "/chat/relay/f-1", headers=asker, json={"sessionId": session.id, "response": {"approved": True}}
            )
            assert denied.status_code == 403 and "may not patch conversations" in denied.json()["error"]
            assert count_effects(api_client, namespace, EFFECT_LABEL, "auth") == 0
            ok = other.post(
                "/chat/relay/f-1", headers=approver, json={"sessionId": session.id, "response": {"approved": True}}
            )
            assert ok.json() == {"success": True}
        events = session.rest()
    assert events[-1][0] == "harness_end" and count_effects(api_client, namespace, EFFECT_LABEL, "auth") == 1


def test_an_rlm_session_computes_over_tool_output_under_the_same_rules(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    code = (
        "Let me look.\n```python\n"
        f"out = slow_probe(namespace={namespace!r}, tag='rlm')\n"
        "print(out.upper(), len(out))\n"
        "try:\n"
        f"    apply_fix(namespace={namespace!r}, tag='rlm')\n"
        "except ToolDenied as exc:\n"
        "    print('refused:', exc)\n"
        "```"
    )
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content=code),
                Step(content="The probe is fine; the fix was refused."),
            ],
        )
    )
    s = stack(scenario_name)
    with s.client() as http:
        session = Session(
            http,
            {
                "model": scenario_name,
                "mode": "rlm",
                "maxIterations": 3,
                "messages": [{"role": "user", "content": "Probe it, then try the fix."}],
                "permissions": {"allowlist": [{"tool": "slow_probe"}]},
            },
        )
        session.until(lambda seen: relays(seen))
        [relay] = relays(session.seen)
        assert relay["tool"] == "apply_fix" and relay["agentId"] == "main"
        assert answer(http, session.id, relay["id"], approved=False, reason="not today").json() == {"success": True}
        events = session.rest()
    assert names(events) == [
        "connected",
        "harness_start",
        "usage",
        "text",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_call",
        "relay",
        "tool_result",
        "tool_result",
        "usage",
        "text",
        "harness_end",
    ]
    calls = [d for n, d in events if n == "tool_call"]
    assert [c["name"] for c in calls] == ["repl", "slow_probe", "apply_fix"]
    assert calls[1]["input"] == {"namespace": namespace, "tag": "rlm"}
    results = {d["id"]: d["output"] for n, d in events if n == "tool_result"}
    assert results[calls[1]["id"]] == "probe rlm: all good"
    assert results[calls[2]["id"]] == {"status": "denied", "reason": "not today"}
    # The code computed over the tool's output, and caught the refusal.
    assert results[calls[0]["id"]].strip().splitlines() == ["PROBE RLM: ALL GOOD 19", "refused: not today"]
    assert events[-1][1]["reason"] == "final" and events[-1][1]["iterations"] == 2
    assert all(d["runId"] == f"{session.id}/0" and d["agentId"] == "main" for _, d in events[1:])
    assert count_effects(api_client, namespace, PROBE_LABEL, "rlm") == 1
    assert count_effects(api_client, namespace, EFFECT_LABEL, "rlm") == 0


def test_rlm_llm_query_is_a_model_call_bounded_by_max_depth(stack: Any, model_server: Any, scenario_name: str) -> None:
    code = (
        "```python\n"
        "try:\n"
        "    print('sub:', llm_query('SUMMARIZE-ME please'))\n"
        "except DepthExceeded as exc:\n"
        "    print('no deeper:', exc)\n"
        "```"
    )
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[Step(content=code), Step(content="done")],
            rules=[{"when": {"last_user_contains": "SUMMARIZE-ME"}, "respond": {"content": "a short summary"}}],
        )
    )
    s = stack(scenario_name)
    outputs = {}
    with s.client() as http:
        for depth in (1, 0):
            events = Session(
                http,
                {
                    "model": scenario_name,
                    "mode": "rlm",
                    "maxDepth": depth,
                    "messages": [{"role": "user", "content": "Summarize."}],
                },
            ).rest()
            assert events[-1][0] == "harness_end" and events[-1][1]["reason"] == "final"
            [repl] = [d for n, d in events if n == "tool_result"]
            outputs[depth] = repl["output"].strip()
            assert names(events).count("usage") == (3 if depth else 2)  # llm_query is a model call too
    assert outputs[1] == "sub: a short summary"
    assert outputs[0] == "no deeper: llm_query is not available at depth 1 (maxDepth 0)"
