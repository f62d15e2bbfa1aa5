"""The full lifecycle of an Investigation on the real control plane, with KWOK pods."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s
from opkit import (
    create_inv,
    phase_is,
    resource_version,
    transcript_messages,
    wait_event,
    wait_until,
    watch_phases,
)

from lestrade.modelserver import Scenario, Step, ToolCall

ANSWER = {
    "Cause": "Pod web-1 is crash-looping: its container was OOMKilled (exit code 137).",
    "Fix": "Raise the memory limit of web-1.",
}


def crashloop_pod(api_client: k8s.ApiClient, namespace: str, name: str) -> None:
    k8s.CoreV1Api(api_client).create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name=name, annotations={"lestrade.dev/simulate": "crashloop"}),
            spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="app", image="shop/web:1.4")]),
        ),
    )

    def crashlooping() -> bool:
        pod = k8s.CoreV1Api(api_client).read_namespaced_pod(name, namespace)
        statuses = pod.status.container_statuses or []
        return any(s.state.waiting and s.state.waiting.reason == "CrashLoopBackOff" for s in statuses)

    wait_until(f"pod {name} in CrashLoopBackOff (KWOK)", crashlooping, timeout=60)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_investigation_runs_pending_running_succeeded(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    crashloop_pod(api_client, namespace, "web-1")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            name="kubectl_describe", arguments={"kind": "pod", "name": "web-1", "namespace": namespace}
                        )
                    ],
                    latency_ms=1000,  # longer than the status interval (0.3 s): Running is seen
                ),
                Step(tool_calls=[ToolCall(name="kubectl_events", arguments={"namespace": namespace})]),
                Step(content="```json\n" + json.dumps(ANSWER) + "\n```"),
            ],
        )
    )
    start_operator(scenario_name)
    since = resource_version(api_client, namespace)  # so the watch cannot start after Pending
    create_inv(
        api_client,
        namespace,
        "web-crash",
        description="web-1 keeps restarting",
        subject={"kind": "Pod", "name": "web-1", "namespace": namespace},
        sections={"Cause": "why it fails", "Fix": "what to do"},
    )
    final, seen = watch_phases(api_client, namespace, "web-crash", phase_is("Succeeded", "Failed"), since=since)

    # Phases in order, as a watcher (kubectl get inv -w) sees them: with a free run slot the
    # first status written says Running (Pending only while a run waits for a slot,
    # test_op_limits; a run that ends within the status interval shows only its end,
    # test_op_coalesced_writes), and the run starts from no status at all.
    phases = [(o.get("status") or {}).get("phase") for o in seen]
    compact = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert compact == [None, "Running", "Succeeded"], compact

    status = final["status"]
    conds = conditions(final)
    assert conds["Succeeded"]["status"] == "True" and conds["Succeeded"]["reason"] == "Completed"
    assert conds["Succeeded"]["message"]
    running = [conditions(o).get("Succeeded") for o in seen if (o.get("status") or {}).get("phase") == "Running"]
    assert running and all(c and c["status"] == "Unknown" for c in running)

    assert status["steps"] == 3
    assert status["toolCallCount"] == 2
    assert [c["name"] for c in status["toolCalls"]] == ["kubectl_describe", "kubectl_events"]
    assert all(c["status"] == "success" for c in status["toolCalls"])
    assert status["toolCalls"][0]["description"].startswith("kubectl describe pod web-1")
    assert status["usage"]["totalTokens"] > 0
    assert status["usage"]["totalTokens"] == status["usage"]["promptTokens"] + status["usage"]["completionTokens"]
    assert status["sections"] == ANSWER
    assert "OOMKilled" in status["analysis"]
    assert status["startTime"] <= status["completionTime"]
    assert status["model"] == scenario_name
    assert status.get("pendingApprovals", []) == []
    assert len(json.dumps(status)) < 32 * 1024

    # The transcript: every message, owned by the Investigation, referenced from status.
    state, chunks = transcript_messages(api_client, final)
    assert status["transcript"]["names"] == [cm.metadata.name for cm in chunks]
    assert status["transcript"]["messages"] == len(state.messages)
    roles = [m["role"] for m in state.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    describe_result = state.messages[3]["content"]
    assert "CrashLoopBackOff" in describe_result and "OOMKilled" in describe_result
    assert state.started == {c["id"] for c in status["toolCalls"]}
    for cm in chunks:
        assert cm.metadata.owner_references[0].uid == final["metadata"]["uid"]

    # Milestone Events.
    wait_event(api_client, namespace, "web-crash", "Started", "Succeeded")

    # Finished: no finalizer is left behind, so deleting is immediate.
    wait_until(
        "the finalizer to go",
        lambda: (
            not k8s.CustomObjectsApi(api_client)
            .get_namespaced_custom_object("lestrade.dev", "v1alpha1", namespace, "investigations", "web-crash")[
                "metadata"
            ]
            .get("finalizers")
        ),
    )


def test_unknown_model_fails_with_reason(
    api_client: k8s.ApiClient,
    namespace: str,
    scenario_name: str,
    model_server: Any,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="hi")]))
    start_operator(scenario_name)
    create_inv(api_client, namespace, "bad-model", model="no-such-model")
    final, _ = watch_phases(api_client, namespace, "bad-model", phase_is("Succeeded", "Failed"))
    cond = conditions(final)["Succeeded"]
    assert final["status"]["phase"] == "Failed"
    assert cond["status"] == "False" and cond["reason"] == "InvalidModel"
    assert "no-such-model" in cond["message"]
    wait_event(api_client, namespace, "bad-model", "InvalidModel")


def _holding_final_writes(held: list[str]) -> Any:
    """An aiohttp session factory for the operator whose final status write (phase Succeeded or
    Failed) is applied by the apiserver but whose answer never comes back: Kopf sees the write
    on its watch and stops the daemon (its work filter no longer matches) while the run still
    awaits the answer, the race in which a run used to lose its last Event."""
    import asyncio
    import functools

    import aiohttp

    async def hold(session: Any, ctx: Any, params: aiohttp.TraceRequestEndParams) -> None:
        if params.method != "PATCH" or not params.url.path.endswith("/status"):
            return
        phase = ((await params.response.json()).get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed"):
            return
        try:
            await asyncio.Event().wait()  # never answers: only the daemon's stop ends this
        except asyncio.CancelledError:
            held.append(params.url.path.split("/")[-2])
            raise

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(hold)
    return functools.partial(aiohttp.ClientSession, trace_configs=[trace])


def test_last_event_survives_the_daemon_stopping_on_the_final_write(
    api_client: k8s.ApiClient,
    namespace: str,
    scenario_name: str,
    model_server: Any,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="All good.")]))
    held: list[str] = []
    start_operator(scenario_name, session_factory=_holding_final_writes(held))
    create_inv(api_client, namespace, "fine")
    create_inv(api_client, namespace, "bad-model", model="no-such-model")
    for name, phase in (("fine", "Succeeded"), ("bad-model", "Failed")):
        final, _ = watch_phases(api_client, namespace, name, phase_is("Succeeded", "Failed"))
        assert final["status"]["phase"] == phase
    wait_until("both daemons to be stopped during their final write", lambda: sorted(held) == ["bad-model", "fine"])
    wait_event(api_client, namespace, "fine", "Succeeded")
    wait_event(api_client, namespace, "bad-model", "InvalidModel")
