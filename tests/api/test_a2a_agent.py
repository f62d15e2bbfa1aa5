"""Lestrade as an A2A agent, driven by the A2A SDK's own client over a real socket against the
real API, the real operator and the scripted model: a user with RBAC sends a message (a
Conversation turn, asked as that user), follows the task's stream to the answer, asks again in
the same context (the same Conversation), sees a task wait as `input-required` while a call
waits for a person and finish once a person approved it; is rejected for a namespace they
cannot use; another user can neither read that task nor write into that context's
Conversation; and a 0.3 client's `message/send` works too."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_message
from a2a.types.a2a_pb2 import GetTaskRequest, Role, SendMessageRequest, TaskState
from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP
from lestrade.resources.tenancy import REQUESTED_BY_ANNOTATION
from lestrade.testing.rbac import grant_lestrade_role as grant


def _message(text: str, context_id: str | None = None, task_id: str | None = None) -> Any:
    return new_text_message(text, context_id=context_id, task_id=task_id, role=Role.ROLE_USER)


async def _send(client: Any, message: Any, metadata: dict[str, str] | None = None) -> tuple[list[Any], Any]:
    """Every streamed event, and the task's last status."""
    events, last = [], None
    request = SendMessageRequest(message=message)
    if metadata:
        request.metadata.update(metadata)
    async for event in client.send_message(request):
        events.append(event)
        if event.HasField("status_update"):
            last = event.status_update.status
        elif event.HasField("task"):
            last = event.task.status
    return events, last


def _text(status: Any) -> str:
    return "\n".join(p.text for p in status.message.parts)


async def test_an_a2a_client_asks_follows_and_is_refused_where_rbac_says_no(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
) -> None:
    fix = f"{scenario_name}-fix"
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="probe-1", name="slow_probe", arguments={"namespace": namespace, "tag": scenario_name}
                        )
                    ]
                ),
                Step(content="web is OOMKilled: the 64Mi limit is too small."),
                Step(content="Raise it to 256Mi."),
            ],
        )
    )
    model_server.add_scenario(
        Scenario(
            name=fix,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": fix})]
                ),
                Step(content="The fix is applied."),
            ],
        )
    )
    grant(
        api_client,
        namespace,
        "agent",
        [("investigations", ["create"]), ("conversations", ["create", "get", "list", "patch"])],
    )
    grant(
        api_client,
        namespace,
        "other-agent",
        [("investigations", ["create"]), ("conversations", ["create", "get", "list", "patch"])],
    )
    user = f"system:serviceaccount:{namespace}:agent"
    token, other_token = cluster.token_for(namespace, "agent"), cluster.token_for(namespace, "other-agent")
    s = stack(scenario_name, fix, auth=True)
    for t in (token, other_token):
        wait_until(
            "RBAC to allow",
            lambda t=t: httpx.get(f"{s.base}/api/model", headers={"Authorization": f"Bearer {t}"}).status_code == 200,
            30,
        )

    card = httpx.get(f"{s.base}/.well-known/agent-card.json")  # public: it holds no data
    assert card.status_code == 200 and card.json()["supportedInterfaces"][0]["url"] == f"{s.base}/a2a", card.text
    assert (
        httpx.post(
            f"{s.base}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        ).status_code
        == 401
    )

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=300) as http:
        client = await create_client(s.base, client_config=ClientConfig(httpx_client=http, streaming=True))
        events, last = await _send(client, _message("Why does web keep restarting?"))
        assert last.state == TaskState.TASK_STATE_COMPLETED, last
        assert _text(last) == "web is OOMKilled: the 64Mi limit is too small."
        working = [
            _text(e.status_update.status)
            for e in events
            if e.HasField("status_update") and e.status_update.status.state == TaskState.TASK_STATE_WORKING
        ]
        assert any("calling slow_probe" in w for w in working), working
        artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
        assert [a.parts[0].text for a in artifacts] == ["web is OOMKilled: the 64Mi limit is too small."]
        first = next(e.task for e in events if e.HasField("task"))
        got = await client.get_task(GetTaskRequest(id=first.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED

        # The same context asks the same Conversation again.
        events, last = await _send(client, _message("And how do I fix it?", context_id=first.context_id))
        assert last.state == TaskState.TASK_STATE_COMPLETED and _text(last) == "Raise it to 256Mi."
        convs = k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
            GROUP, "v1alpha1", namespace, "conversations"
        )["items"]
        assert len(convs) == 1, [c["metadata"]["name"] for c in convs]
        assert [t["ask"] for t in convs[0]["spec"]["turns"]] == [
            "Why does web keep restarting?",
            "And how do I fix it?",
        ]
        assert convs[0]["metadata"]["annotations"][REQUESTED_BY_ANNOTATION] == user  # asked as the caller
        mine = convs[0]["metadata"]["name"]

        # A call that needs a person: input-required, until a person approves; then the answer.
        events, last = await _send(client, _message("Fix web."), {"model": fix})
        assert last.state == TaskState.TASK_STATE_INPUT_REQUIRED, last
        assert "apply_fix" in _text(last) and "kubectl" in _text(last) and '"fix-1"' in _text(last)
        waiting = next(e.task for e in events if e.HasField("task"))
        chat = next(
            c
            for c in k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
                GROUP, "v1alpha1", namespace, "conversations"
            )["items"]
            if c["spec"].get("model") == fix
        )
        k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            GROUP,
            "v1alpha1",
            namespace,
            "conversations",
            chat["metadata"]["name"],
            {
                "spec": {
                    "decisions": {
                        "fix-1": {"approved": True, "digest": chat["status"]["pendingApprovals"][0]["digest"]}
                    }
                }
            },
        )
        _, last = await _send(client, _message("Approved.", context_id=waiting.context_id, task_id=waiting.id))
        assert last.state == TaskState.TASK_STATE_COMPLETED and _text(last) == "The fix is applied.", last

        # Refused where RBAC says no.
        _, last = await _send(client, _message("Anything wrong?"), {"namespace": f"{namespace}-nope"})
        assert last.state == TaskState.TASK_STATE_REJECTED
        assert f"may not create conversations.{GROUP} in namespace {namespace}-nope" in _text(last)

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {other_token}"}, timeout=60) as http:
        stranger = await create_client(s.base, client_config=ClientConfig(httpx_client=http, streaming=False))
        try:
            await stranger.get_task(GetTaskRequest(id=first.id))
            raise AssertionError("another user read the task")
        except Exception as exc:  # noqa: BLE001 — the SDK's task-not-found error
            assert "not found" in str(exc).lower(), exc
        # Another user's message in my context (its id is no secret) starts their own Conversation.
        _, last = await _send(stranger, _message("What did they ask?", context_id=first.context_id))
        assert last.state == TaskState.TASK_STATE_COMPLETED, last
    turns = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, "v1alpha1", namespace, "conversations", mine
    )["spec"]["turns"]
    assert [t["ask"] for t in turns] == ["Why does web keep restarting?", "And how do I fix it?"]

    # An A2A 0.3 client's method names on the same endpoint.
    legacy = httpx.post(
        f"{s.base}/a2a",
        headers={"Authorization": f"Bearer {token}"},
        timeout=300,
        json={
            "jsonrpc": "2.0",
            "id": 7,
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": uuid.uuid4().hex,
                    "role": "user",
                    "parts": [{"kind": "text", "text": "Why does web keep restarting?"}],
                }
            },
        },
    )
    assert legacy.status_code == 200, legacy.text
    result = legacy.json()["result"]
    assert result["status"]["state"] == "completed", result
    assert "OOMKilled" in result["artifacts"][0]["parts"][0]["text"]
