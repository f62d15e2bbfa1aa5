"""Authorization follows Kubernetes RBAC for HTTP callers as for kubectl users: a caller who may
create Conversations but not patch them can chat but cannot approve a waiting call over HTTP;
one who may patch them can. Real tokens (TokenRequest), real SubjectAccessReviews."""

from __future__ import annotations

import json
from typing import Any

import httpx
from convkit import get_conv
from kubernetes import client as k8s
from opkit import EFFECT_LABEL, count_effects

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP
from lestrade.testing.rbac import grant_lestrade_role as grant


def test_approving_over_http_needs_the_right_to_patch_the_conversation(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any, cluster: Any
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": tag})]
                ),
                Step(content="Fixed."),
            ],
        )
    )
    gate = ("investigations", ["create"])  # what every API call needs (auth.py)
    grant(api_client, namespace, "asker", [gate, ("conversations", ["create", "get"])])
    grant(api_client, namespace, "approver", [gate, ("conversations", ["create", "get", "patch"])])
    s = stack(scenario_name, auth=True)
    asker = {"Authorization": f"Bearer {cluster.token_for(namespace, 'asker')}"}
    approver = {"Authorization": f"Bearer {cluster.token_for(namespace, 'approver')}"}
    with s.client() as http:
        assert http.post("/api/chat", json={"ask": "Fix it."}).status_code == 401
        for headers in (asker, approver):
            wait_until("RBAC to allow", lambda h=headers: http.get("/api/model", headers=h).status_code == 200, 30)

        paused = http.post("/api/chat", headers=asker, json={"ask": "Fix it.", "enable_tool_approval": True})
        assert paused.status_code == 200, paused.text
        body = paused.json()
        assert [p["tool_call_id"] for p in body["pending_approvals"]] == ["fix-1"]
        decide = {
            "conversation_history": body["conversation_history"],
            "tool_decisions": [{"tool_call_id": "fix-1", "approved": True}],
        }

        refused = http.post("/api/chat", headers=asker, json=decide)
        assert refused.status_code == 403, refused.text
        assert refused.json()["field"] == "authorization"
        assert f"system:serviceaccount:{namespace}:asker may not patch conversations" in refused.json()["detail"]
        follow_up = http.post(
            "/api/chat", headers=asker, json={"ask": "More?", "conversation_history": body["conversation_history"]}
        )
        assert follow_up.status_code == 403
        assert "decisions" not in get_conv(api_client, namespace, body["conversation_id"])["spec"]
        assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 0

        approved = http.post("/api/chat", headers=approver, json=decide)
        assert approved.status_code == 200, approved.text
        assert approved.json()["analysis"] == "Fixed."
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1


def test_investigations_and_resumed_streams_are_authorized_too(
    stack: Any, scenario_name: str, namespace: str, api_client: Any, cluster: Any
) -> None:
    grant(api_client, namespace, "gate-only", [("investigations", ["create"])])
    s = stack(scenario_name, auth=True, operator=False)
    headers = {"Authorization": f"Bearer {cluster.token_for(namespace, 'gate-only')}"}
    with s.client() as http:
        wait_until("RBAC to allow", lambda: http.get("/api/model", headers=headers).status_code == 200, 30)
        chat = http.post("/api/chat", headers=headers, json={"ask": "hi"})
        assert chat.status_code == 403 and "may not create conversations" in chat.json()["detail"]
        resumed = http.post(
            "/api/chat", headers={**headers, "Last-Event-ID": "conv/some-chat/3"}, json={"ask": "hi", "stream": True}
        )
        assert resumed.status_code == 403 and "may not get conversations" in resumed.json()["detail"]
    assert httpx.get(f"{s.base}/healthz").status_code == 200


def test_static_api_keys(stack: Any, model_server: Any, scenario_name: str, tmp_path: Any) -> None:
    from lestrade.api.base.auth import load_api_keys

    (tmp_path / "ci").write_text("s3cret-key\n")
    (tmp_path / "robusta").write_text("other-key")
    keys = load_api_keys({"LESTRADE_API_KEYS_DIR": str(tmp_path)})
    assert keys == {"ci": "s3cret-key", "robusta": "other-key"}
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="Hello, key holder.")]))
    s = stack(scenario_name, auth=True, api_keys=keys)
    with s.client() as http:
        assert http.get("/api/model", headers={"X-API-Key": "s3cret-key"}).status_code == 200
        chat = http.post("/api/chat", headers={"Authorization": "Bearer other-key"}, json={"ask": "hi"})
        assert chat.status_code == 200 and chat.json()["analysis"] == "Hello, key holder."
        wrong = http.get("/api/model", headers={"X-API-Key": "guess"})
        assert wrong.status_code == 401 and "X-API-Key" in wrong.json()["detail"]
        assert http.get("/api/model", headers={"Authorization": "Bearer guess"}).status_code == 401
        assert http.get("/api/model").status_code == 401


def test_writes_over_http_are_made_as_the_caller(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any, cluster: Any
) -> None:
    """Admission sees the HTTP caller, not the API: a policy in this namespace that refuses
    writes by anyone but the namespace's ServiceAccounts lets the caller's chat through."""
    from lestrade.resources.rest import request_json

    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="Hello.")]))
    policy = f"only-callers-{namespace}"[:63]
    request_json(
        api_client,
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [GROUP],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["conversations", "investigations"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"request.userInfo.username.startsWith('system:serviceaccount:{namespace}:')",
                        "messageExpression": "'written by ' + request.userInfo.username",
                    }
                ],
            },
        },
    )
    request_json(
        api_client,
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {
                "policyName": policy,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        },
    )
    try:
        probes = iter(range(10_000))

        def enforced() -> bool:  # the admin (what the API runs as here) is refused once it is active
            try:
                k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
                    GROUP,
                    "v1alpha1",
                    namespace,
                    "conversations",
                    {
                        "apiVersion": f"{GROUP}/v1alpha1",
                        "kind": "Conversation",
                        "metadata": {"name": f"probe-{next(probes)}"},
                        "spec": {"turns": []},
                    },
                )
            except k8s.ApiException as exc:
                return exc.status in (403, 422) and "written by" in (exc.body or "")
            return False

        wait_until("the policy to be enforced", enforced, 30)
        grant(
            api_client,
            namespace,
            "writer",
            [("investigations", ["create"]), ("conversations", ["create", "get", "patch"])],
        )
        s = stack(scenario_name, auth=True)
        headers = {"Authorization": f"Bearer {cluster.token_for(namespace, 'writer')}"}
        with s.client() as http:
            wait_until("RBAC to allow", lambda: http.get("/api/model", headers=headers).status_code == 200, 30)
            answered = http.post("/api/chat", headers=headers, json={"ask": "Hi?"})
            assert answered.status_code == 200, answered.text
            assert answered.json()["analysis"] == "Hello."
            # no Content-Type, as the Robusta runner sends it: read as JSON with authentication on
            raw = json.dumps({"ask": "Again?", "conversation_history": answered.json()["conversation_history"]})
            again = http.post("/api/chat", headers={**headers, "Content-Type": ""}, content=raw.encode())
            assert again.status_code == 200, again.text  # the patch that appends a turn, as the caller
    finally:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            request_json(api_client, "DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/{policy}")
