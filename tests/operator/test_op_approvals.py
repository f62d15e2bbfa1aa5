"""Approvals end to end: pause, `kubectl patch` decisions (approve, deny, partial, bogus),
resume with the stored calls, and approvals switched off."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    count_effects,
    create_inv,
    install_policy,
    patch_decisions,
    phase_is,
    transcript_messages,
    wait_event,
    wait_inv,
)

from lestrade.modelserver import Scenario, Step, ToolCall


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def fix(call_id: str, namespace: str, tag: str) -> ToolCall:
    return ToolCall(id=call_id, name="apply_fix", arguments={"namespace": namespace, "tag": tag})


def test_approve_deny_partial_and_bogus_decisions(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    install_policy(api_client, namespace)
    tag_a, tag_b = f"{scenario_name}-a", f"{scenario_name}-b"
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        fix("fix-a", namespace, tag_a),
                        fix("fix-b", namespace, tag_b),
                        ToolCall(id="look", name="kubectl_events", arguments={"namespace": namespace}),
                    ]
                ),
                Step(content="Applied fix A; fix B was refused."),
            ],
        )
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "needs-ok")

    paused = wait_inv(api_client, namespace, "needs-ok", phase_is("AwaitingApproval", "Failed", "Succeeded"))
    status = paused["status"]
    assert status["phase"] == "AwaitingApproval"
    assert [(p["toolCallId"], p["toolName"]) for p in status["pendingApprovals"]] == [
        ("fix-a", "apply_fix"),
        ("fix-b", "apply_fix"),
    ]
    assert status["pendingApprovals"][0]["params"] == {"namespace": namespace, "tag": tag_a}
    assert status["pendingApprovals"][0]["description"] == f"apply fix {tag_a} in {namespace}"
    assert conditions(paused)["AwaitingApproval"]["status"] == "True"
    assert conditions(paused)["Succeeded"]["status"] == "Unknown"
    assert "kubectl patch inv needs-ok" in status["message"]
    calls = {c["id"]: c["status"] for c in status["toolCalls"]}
    assert calls == {"look": "success", "fix-a": "approval_required", "fix-b": "approval_required"}
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag_a) == 0
    wait_event(api_client, namespace, "needs-ok", "ApprovalRequired")

    # A decision for an id that is not pending is refused at patch time, with the pending ids.
    with pytest.raises(k8s.ApiException) as refused:
        patch_decisions(api_client, namespace, "needs-ok", {"fix-z": {"approved": True}})
    assert refused.value.status == 422
    assert "fix-z" in refused.value.body and "fix-a, fix-b" in refused.value.body

    # A partial decision is recorded but the run keeps waiting for the rest.
    patch_decisions(api_client, namespace, "needs-ok", {"fix-a": {"approved": True}})
    waiting = wait_inv(
        api_client, namespace, "needs-ok", lambda o: "1 of 2 decided" in (o.get("status") or {}).get("message", "")
    )
    assert waiting["status"]["phase"] == "AwaitingApproval"
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag_a) == 0
    # Each pending call shows the digest of its name and arguments; decisions are bound to it.
    digests = {p["toolCallId"]: p["digest"] for p in waiting["status"]["pendingApprovals"]}
    assert set(digests) == {"fix-a", "fix-b"} and all(d.startswith("sha256:") for d in digests.values())

    patch_decisions(api_client, namespace, "needs-ok", {"fix-b": {"approved": False, "reason": "not in prod"}})
    done = wait_inv(api_client, namespace, "needs-ok", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert conditions(done)["AwaitingApproval"]["status"] == "False"
    assert done["status"]["pendingApprovals"] == []
    assert {c["id"]: c["status"] for c in done["status"]["toolCalls"]} == {
        "look": "success",
        "fix-a": "success",
        "fix-b": "denied",
    }

    # The approved call ran once, with the stored arguments; the denied one never ran.
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag_a) == 1
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag_b) == 0
    # The model was not asked again for the step whose calls waited (the stored calls ran).
    assert len(model_server.requests(scenario_name)) == 2
    state, _ = transcript_messages(api_client, done)
    results = {m["tool_call_id"]: m["content"] for m in state.messages if m["role"] == "tool"}
    assert results["fix-a"] == f"fix {tag_a} applied"
    assert "denied" in results["fix-b"] and "not in prod" in results["fix-b"]
    assert state.decisions == {
        "fix-a": {"approved": True, "reason": None, "digest": digests["fix-a"]},
        "fix-b": {"approved": False, "reason": "not in prod", "digest": digests["fix-b"]},
    }
    last_request = model_server.requests(scenario_name)[-1]["messages"]
    assert any(m.get("tool_call_id") == "fix-b" and "not in prod" in str(m.get("content")) for m in last_request)

    # An existing decision cannot be changed afterwards.
    with pytest.raises(k8s.ApiException) as changed:
        patch_decisions(api_client, namespace, "needs-ok", {"fix-b": {"approved": True}})
    assert changed.value.status == 422 and "already decided" in changed.value.body


def test_decisions_that_name_no_pending_call_are_reported_by_the_operator(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    # Decisions written at creation are not checked by admission (nothing was pending yet),
    # so the operator itself must say that it ignores them.
    tag = f"{scenario_name}-x"
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix("fix-1", namespace, tag)]),
                Step(content="done"),
            ],
        )
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "ghostly", decisions={"ghost": {"approved": True}})
    flagged = wait_inv(
        api_client, namespace, "ghostly", lambda o: conditions(o).get("DecisionsAccepted", {}).get("status") == "False"
    )
    assert flagged["status"]["phase"] == "AwaitingApproval"
    assert "ghost is not a tool call of this investigation" in conditions(flagged)["DecisionsAccepted"]["message"]
    wait_event(api_client, namespace, "ghostly", "InvalidDecision")
    patch_decisions(api_client, namespace, "ghostly", {"fix-1": {"approved": True}})
    done = wait_inv(api_client, namespace, "ghostly", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded"
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1


def test_with_approvals_off_such_calls_become_errors_for_the_model(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    tag = f"{scenario_name}-off"
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix("fix-1", namespace, tag)]),
                Step(content="I could not apply the fix; run it yourself."),
            ],
        )
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "no-approvals", enableToolApproval=False)
    done = wait_inv(api_client, namespace, "no-approvals", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["toolCalls"][0]["status"] == "error"
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 0
    state, _ = transcript_messages(api_client, done)
    (result,) = [m["content"] for m in state.messages if m["role"] == "tool"]
    assert "approval" in result
    assert json.dumps(done["status"]).count("AwaitingApproval") == 0


def test_the_real_write_tool_runs_once_approved(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="stuck"),
            spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="app", image="shop/web:1.4")]),
        ),
    )
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="del-1", name="kubectl_delete_pod", arguments={"namespace": namespace, "name": "stuck"}
                        )
                    ]
                ),
                Step(content="Deleted the stuck pod."),
            ],
        )
    )
    # The product's own registry, with the write actions switched on.
    start_operator(scenario_name, tools=None, tools_write_tools=True)
    create_inv(api_client, namespace, "unstick")
    paused = wait_inv(api_client, namespace, "unstick", phase_is("AwaitingApproval", "Failed", "Succeeded"))
    assert paused["status"]["pendingApprovals"][0]["description"] == f"kubectl delete pod stuck -n {namespace}"
    assert core.read_namespaced_pod("stuck", namespace).metadata.deletion_timestamp is None
    patch_decisions(api_client, namespace, "unstick", {"del-1": {"approved": True}})
    done = wait_inv(api_client, namespace, "unstick", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["toolCalls"][0]["status"] == "success"
    try:  # deleted, or being deleted (KWOK may still be finishing it)
        assert core.read_namespaced_pod("stuck", namespace).metadata.deletion_timestamp is not None
    except k8s.ApiException as exc:
        assert exc.status == 404


def test_an_approval_never_carries_over_to_a_later_call_with_the_same_provider_id(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    # A provider that calls every tool call `call_0`: the approval of the first fix stays in
    # spec.decisions, and must not run the second one.
    tag_1, tag_2 = f"{scenario_name}-1", f"{scenario_name}-2"
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix("call_0", namespace, tag_1)]),
                Step(tool_calls=[fix("call_0", namespace, tag_2)]),
                Step(content="done"),
            ],
        )
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "same-ids")
    paused = wait_inv(api_client, namespace, "same-ids", phase_is("AwaitingApproval", "Failed"))
    (first,) = paused["status"]["pendingApprovals"]
    assert first["toolCallId"] == "call_0"
    patch_decisions(api_client, namespace, "same-ids", {"call_0": {"approved": True}})

    def second_pause(obj: dict[str, Any]) -> bool:
        pending = (obj.get("status") or {}).get("pendingApprovals") or []
        return bool(pending) and pending[0]["toolCallId"] != "call_0" or phase_is("Succeeded", "Failed")(obj)

    again = wait_inv(api_client, namespace, "same-ids", second_pause)
    assert again["status"]["phase"] == "AwaitingApproval"
    (second,) = again["status"]["pendingApprovals"]
    assert second["params"]["tag"] == tag_2 and second["digest"] != first["digest"]
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag_1) == 1
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag_2) == 0


def test_a_decision_carrying_another_digest_is_not_applied(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    tag = f"{scenario_name}-d"
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[fix("fix-1", namespace, tag)]),
                Step(content="{{ tool_output('apply_fix') }}"),
            ],
        )
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "digests")
    wait_inv(api_client, namespace, "digests", phase_is("AwaitingApproval", "Failed"))
    wrong = "sha256:" + "0" * 64
    patch_decisions(api_client, namespace, "digests", {"fix-1": {"approved": True, "digest": wrong}})
    done = wait_inv(api_client, namespace, "digests", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded"
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 0
    assert {c["id"]: c["status"] for c in done["status"]["toolCalls"]} == {"fix-1": "error"}
    assert "different call" in done["status"]["analysis"]
    state, _ = transcript_messages(api_client, done)
    assert state.decisions["fix-1"]["digest"] == wrong
