"""Lestrade as an MCP server (`/mcp`), driven by the official MCP client SDK over a real socket
against the real API, the real operator and the scripted model: a user with RBAC in one
namespace starts an investigation, follows it by progress notifications to its findings, reads
it as a tool result and as a resource, finds it again among past findings, sees a paused run's
waiting call (read-only); and is refused for a namespace they cannot read."""

from __future__ import annotations

import json
from typing import Any

import httpx
from kubernetes import client as k8s
from mcpkit import mcp_session, raw_call
from opkit import create_inv

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP
from lestrade.resources.tenancy import REQUESTED_BY_ANNOTATION
from lestrade.testing.rbac import grant_lestrade_role as grant

ROOT_CAUSE = "web-7f9 is OOMKilled: its 64Mi memory limit is too small for the JVM heap"


def _answer(text: str) -> str:
    return f"## Alert Explanation\nweb restarts.\n\n## Conclusions and Possible Root Causes\n{text}\n\n## Next Steps\nRaise the limit.\n"


async def test_an_mcp_client_investigates_and_reads_findings_as_a_user_with_rbac(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
) -> None:
    paused = f"{scenario_name}-fix"
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
                Step(content=_answer(ROOT_CAUSE)),
            ],
        )
    )
    model_server.add_scenario(
        Scenario(
            name=paused,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": paused})
                    ]
                ),
                Step(content="fixed"),
            ],
        )
    )
    grant(
        api_client,
        namespace,
        "agent",
        [("investigations", ["create", "get", "list"]), ("conversations", ["create", "get", "list", "patch"])],
    )
    user = f"system:serviceaccount:{namespace}:agent"
    token = cluster.token_for(namespace, "agent")
    s = stack(scenario_name, paused, auth=True)
    # Another team's namespace with a finished run the agent may not read.
    other = f"{namespace}-other"
    k8s.CoreV1Api(api_client).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other)))
    try:
        create_inv(api_client, other, "secret-run", title="payroll OOMKilled")
        k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
            GROUP,
            "v1alpha1",
            other,
            "investigations",
            "secret-run",
            {
                "status": {
                    "phase": "Succeeded",
                    "analysis": "payroll OOMKilled: team B's secret plan",
                    "completionTime": "2026-11-20T10:00:00Z",
                }
            },
        )
        wait_until(
            "RBAC to allow",
            lambda: httpx.get(f"{s.base}/api/model", headers={"Authorization": f"Bearer {token}"}).status_code == 200,
            30,
        )

        async with mcp_session(s.base, token) as session:
            tools = {t.name for t in (await session.list_tools()).tools}
            assert {"investigate", "ask", "get_run", "list_runs", "search_findings", "pending_approvals"} <= tools

            steps: list[str] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                steps.append(message or "")

            result = await session.call_tool(
                "investigate",
                {
                    "title": "web keeps restarting",
                    "subject": {"kind": "Deployment", "name": "web", "namespace": namespace},
                },
                progress_callback=progress,
            )
            assert not result.isError, result.content
            found = result.structuredContent
            assert found is not None and found["phase"] == "Succeeded", found
            assert found["sections"]["Conclusions and Possible Root Causes"] == ROOT_CAUSE
            assert [c["name"] for c in found["toolCalls"]] == ["slow_probe"]
            assert "all good" in found["toolCalls"][0]["output"]
            assert any(m.startswith("started investigation") for m in steps), steps
            assert any("calling slow_probe" in m for m in steps) and steps[-1] == "answered", steps
            name = found["name"]
            inv = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
                GROUP, "v1alpha1", namespace, "investigations", name
            )
            assert inv["metadata"]["annotations"][REQUESTED_BY_ANNOTATION] == user  # written as the caller

            # Read back: a tool, a list, a resource, and the past findings.
            again = await session.call_tool("get_run", {"name": name, "namespace": namespace})
            assert again.structuredContent["answer"] == found["answer"]
            listed = (await session.call_tool("list_runs", {"namespace": namespace})).structuredContent["runs"]
            assert name in [r["name"] for r in listed]
            uris = [str(r.uri) for r in (await session.list_resources()).resources]
            uri = f"lestrade://investigations/{namespace}/{name}"
            assert uri in uris and not any(other in u for u in uris), uris
            text = (await session.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
            assert ROOT_CAUSE in text
            search = await session.call_tool("search_findings", {"query": "OOMKilled memory limit"})
            hits = search.structuredContent["findings"]
            assert [h["name"] for h in hits] == [name], hits  # not the other namespace's run
            assert hits[0]["rootCause"] == ROOT_CAUSE and hits[0]["fix"] == "suggested: Raise the limit."
            by_resource = await session.call_tool("search_findings", {"kind": "Deployment", "name": "web"})
            assert [h["name"] for h in by_resource.structuredContent["findings"]] == [name]
            # The same search over HTTP; bad input names the field.
            auth = {"Authorization": f"Bearer {token}"}
            rest = httpx.get(f"{s.base}/api/findings", params={"q": "OOMKilled"}, headers=auth)
            assert rest.status_code == 200 and [f["name"] for f in rest.json()["findings"]] == [name], rest.text
            bad = httpx.get(f"{s.base}/api/findings", params={"since": "yesterday"}, headers=auth)
            assert bad.status_code == 400 and bad.json()["field"] == "since", bad.text
            assert httpx.get(f"{s.base}/api/findings", params={"limit": 0}, headers=auth).status_code == 422

            # A run that needs a person: investigate returns the waiting call; approving stays with people.
            waiting = await session.call_tool("investigate", {"title": "fix web", "model": paused})
            assert not waiting.isError, waiting.content
            assert waiting.structuredContent["phase"] == "AwaitingApproval"
            pending = (await session.call_tool("pending_approvals", {})).structuredContent["pending"]
            assert [(p["name"], p["toolCallId"]) for p in pending] == [(waiting.structuredContent["name"], "fix-1")]
            assert "kubectl" in pending[0]["approveWith"] and '"fix-1"' in pending[0]["approveWith"]
            assert "approve" not in " ".join(tools - {"pending_approvals"})

            # Refused where RBAC says no: another namespace, to read or to start a run in.
            refused = await session.call_tool("get_run", {"name": "secret-run", "namespace": other})
            assert (
                refused.isError
                and f"may not get investigations.{GROUP} in namespace {other}" in refused.content[0].text
            )
            assert "secret plan" not in json.dumps(refused.model_dump())
            started = await session.call_tool("investigate", {"title": "x", "namespace": other})
            assert started.isError and "may not create" in started.content[0].text
            listing = await session.call_tool("list_runs", {"namespace": other})
            assert listing.isError and "may not list" in listing.content[0].text
            assert (
                k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
                    GROUP, "v1alpha1", other, "investigations"
                )["items"][0]["metadata"]["name"]
                == "secret-run"
            )

        # Without a token, /mcp is refused like the rest of the API.
        anonymous = httpx.post(f"{s.base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert anonymous.status_code == 401
    finally:
        k8s.CoreV1Api(api_client).delete_namespace(other, propagation_policy="Background")


async def test_ask_continues_a_conversation_by_name_and_a_second_client_speaks_the_protocol(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="The first answer."),
                Step(content="The second answer."),
                Step(content="The third answer."),
            ],
        )
    )
    s = stack(scenario_name)  # authentication off: the API's own identity
    async with mcp_session(s.base) as session:
        first = await session.call_tool("ask", {"question": "What is wrong?"})
        assert not first.isError, first.content
        assert first.structuredContent["answer"] == "The first answer."
        conversation = first.structuredContent["conversation"]
        second = await session.call_tool("ask", {"question": "And then?", "conversation": conversation})
        assert second.structuredContent["answer"] == "The second answer." and second.structuredContent["turn"] == 1
        missing = await session.call_tool("ask", {"question": "?", "conversation": "no-such-chat"})
        assert missing.isError and "no-such-chat" in missing.content[0].text
    conv = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, "v1alpha1", namespace, "conversations", conversation
    )
    assert [t["ask"] for t in conv["spec"]["turns"]] == ["What is wrong?", "And then?"]

    # A second client, without the SDK: the same tools, the progress notifications on the stream.
    _, listed = raw_call(s.base, "tools/list", {})
    assert "get_run" in {t["name"] for t in listed["result"]["tools"]}
    notes, answer = raw_call(
        s.base,
        "tools/call",
        {
            "name": "ask",
            "arguments": {"question": "Anything else?", "conversation": conversation},
            "_meta": {"progressToken": "p-1"},
        },
    )
    assert answer["result"]["structuredContent"]["answer"] == "The third answer.", answer
    progress = [n["params"] for n in notes if n.get("method") == "notifications/progress"]
    assert progress and all(p["progressToken"] == "p-1" for p in progress) and progress[-1]["message"] == "answered"
