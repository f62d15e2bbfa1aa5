"""Conversations run by the operator, on the real apiserver: turns asked with kubectl, answered
in status, remembered across turns, approved, timed out, deleted, sharing run slots."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from convkit import (
    CONV_PLURAL,
    all_answered,
    ask,
    conv_transcript,
    create_conv,
    patch_conv_decisions,
    turn_phases,
    wait_conv,
)
from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    GROUP,
    PROBE_LABEL,
    VERSION,
    count_effects,
    create_inv,
    phase_is,
    unique,
    wait_event,
    wait_inv,
    wait_until,
)

from lestrade.modelserver import Rule, RuleCondition, Scenario, Step, ToolCall
from lestrade.operator.runs.attempt import NOT_RUN
from lestrade.resources.rest import TABLE, request_json
from lestrade.runs.progress import progress_records


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def probe(call_id: str, namespace: str, tag: str, seconds: float = 0) -> ToolCall:
    return ToolCall(id=call_id, name="slow_probe", arguments={"namespace": namespace, "tag": tag, "seconds": seconds})


def test_turns_are_answered_in_status_and_later_turns_see_earlier_tool_output(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    fact = unique("fact")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[probe("p-1", namespace, fact)]),
                Step(content="The probe ran."),
                Step(content="Nothing new since the probe."),
                Step(content="Turn one's probe said: {{ tool_output('slow_probe') }}"),
            ],
        )
    )
    start_operator(scenario_name)
    create_conv(api_client, namespace, "chat", "Probe the thing, please.")

    first = wait_conv(api_client, namespace, "chat", all_answered(1))
    status = first["status"]
    assert turn_phases(first) == ["Answered"]
    assert status["phase"] == "Answered" and conditions(first)["Answered"]["status"] == "True"
    (turn,) = status["turns"]
    assert turn["ask"] == "Probe the thing, please." and turn["answer"] == "The probe ran."
    assert turn["steps"] == 2 and turn["toolCallCount"] == 1
    assert turn["usage"]["totalTokens"] > 0 and turn["startTime"] and turn["completionTime"]
    assert status["askedTurns"] == 1 and status["answeredTurns"] == 1
    assert [(c["id"], c["status"]) for c in status["toolCalls"]] == [("p-1", "success")]
    assert count_effects(api_client, namespace, PROBE_LABEL, fact) == 1
    wait_event(api_client, namespace, "chat", "TurnStarted", "Answered")

    # Asked again exactly as the README says: a JSON patch that appends a turn.
    ask(api_client, namespace, "chat", "Anything else?")
    second = wait_conv(api_client, namespace, "chat", all_answered(2))
    assert second["status"]["turns"][1]["answer"] == "Nothing new since the probe."
    assert second["status"]["version"] > status["version"]
    ask(api_client, namespace, "chat", "What did the probe say in the first turn?")
    third = wait_conv(api_client, namespace, "chat", all_answered(3))
    assert third["status"]["turns"][2]["answer"] == f"Turn one's probe said: probe {fact}: all good"
    assert third["status"]["answeredTurns"] == 3 and third["status"]["phase"] == "Answered"
    # The model saw the whole earlier conversation, tool output included, in turn 3.
    turn3_request = model_server.requests(scenario_name)[-1]["messages"]
    assert any(f"probe {fact}: all good" == m.get("content") for m in turn3_request if m["role"] == "tool")
    assert [m["content"] for m in turn3_request if m["role"] == "user"][0].startswith("Probe the thing")
    assert count_effects(api_client, namespace, PROBE_LABEL, fact) == 1  # never re-run

    # The transcript holds every message; version counts them; progress records are gap-free.
    state = conv_transcript(api_client, third)
    assert third["status"]["version"] == len(state.messages) + len(state.compactions)
    assert [m["role"] for m in state.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    records = progress_records(state)
    assert [r.seq for r in records] == list(range(len(records)))
    kinds = [r.type for r in records]
    assert kinds.count("turn") == 3 and kinds.count("answer") == 3
    assert kinds.index("tool_started") < kinds.index("tool_result") < kinds.index("answer")
    assert progress_records(state, after=records[-3].seq) == records[-2:]

    # Printer columns, as `kubectl get conv` shows them.
    table = request_json(
        api_client, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{CONV_PLURAL}", accept=TABLE
    )
    columns = [c["name"] for c in table["columnDefinitions"]]
    row = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert (row["Phase"], row["Asked"], row["Answered"]) == ("Answered", 3, 3)


def test_a_turn_waits_for_approval_and_the_stored_call_runs_once(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
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
    start_operator(scenario_name)
    create_conv(api_client, namespace, "approve-me", "Fix it.")
    paused = wait_conv(api_client, namespace, "approve-me", phase_is("AwaitingApproval", "Failed", "Answered"))
    assert paused["status"]["phase"] == "AwaitingApproval"
    assert [p["toolCallId"] for p in paused["status"]["pendingApprovals"]] == ["fix-1"]
    assert turn_phases(paused) == ["AwaitingApproval"]
    assert conditions(paused)["AwaitingApproval"]["status"] == "True"
    assert "kubectl patch conv approve-me" in paused["status"]["message"]
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 0

    patch_conv_decisions(api_client, namespace, "approve-me", {"fix-1": {"approved": True}})
    done = wait_conv(api_client, namespace, "approve-me", all_answered(1))
    assert done["status"]["turns"][0]["answer"] == "Fixed."
    assert done["status"]["pendingApprovals"] == []
    assert conditions(done)["AwaitingApproval"]["status"] == "False"
    assert [(c["id"], c["status"]) for c in done["status"]["toolCalls"]] == [("fix-1", "success")]
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    (pending,) = paused["status"]["pendingApprovals"]  # the decision is bound to this digest
    assert pending["digest"].startswith("sha256:")
    assert conv_transcript(api_client, done).decisions == {
        "fix-1": {"approved": True, "reason": None, "digest": pending["digest"]}
    }


def test_a_turn_times_out_and_the_next_turn_still_works(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            rules=[
                Rule(when=RuleCondition(last_user_contains="slowly"), respond=Step(content="late", latency_ms=60_000)),
                Rule(when=RuleCondition(last_user_contains="quickly"), respond=Step(content="on time")),
            ],
        )
    )
    start_operator(scenario_name)
    create_conv(api_client, namespace, "slow", "Answer slowly.", timeout="4s")
    failed = wait_conv(api_client, namespace, "slow", all_answered(1))
    (turn,) = failed["status"]["turns"]
    assert turn["phase"] == "Failed" and "timeout" in turn["message"]
    assert failed["status"]["phase"] == "Failed"
    assert conditions(failed)["Answered"]["status"] == "False"
    assert conditions(failed)["Answered"]["reason"] == "Timeout"

    ask(api_client, namespace, "slow", "Answer quickly.")
    done = wait_conv(api_client, namespace, "slow", all_answered(2))
    assert turn_phases(done) == ["Failed", "Answered"]
    assert done["status"]["turns"][1]["answer"] == "on time"
    assert done["status"]["phase"] == "Answered"


def test_deleting_a_running_conversation_stops_its_turn(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    """In-process runs have no finalizer, so the delete completes whatever happens: what must
    be seen is the turn stopping — its slow tool cancelled, its run slot freed, the model not
    asked again (issue 29: the old test could not fail)."""
    from lestrade.operator.base.metrics import RUNS_ACTIVE

    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="p", name="slow_probe", arguments={"namespace": namespace, "tag": tag, "seconds": 300}
                        )
                    ]
                ),
                Step(content="never reached"),
            ],
        )
    )
    start_operator(scenario_name)
    active = RUNS_ACTIVE.labels("Conversation")
    before = active._value.get()
    create_conv(api_client, namespace, "doomed", "Think for a long time.")
    wait_until("the tool to start", lambda: count_effects(api_client, namespace, PROBE_LABEL, tag) >= 1, timeout=60)
    assert active._value.get() == before + 1
    k8s.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, CONV_PLURAL, "doomed")
    gone = wait_conv(api_client, namespace, "doomed", lambda o: bool(o.get("deleted")), timeout=30)
    assert gone["metadata"]["name"] == "doomed"
    # The turn stops: its run ends (the 300 s tool is cancelled) well before the tool would.
    wait_until("the turn to stop", lambda: active._value.get() == before, timeout=30)
    assert len(model_server.requests(scenario_name)) == 1  # never asked for the next step


def test_conversations_and_investigations_share_the_run_slots(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            rules=[
                Rule(
                    when=RuleCondition(any_message_contains="hold-the-slot"),
                    respond=Step(content="done holding", latency_ms=6_000),
                ),
                Rule(when=RuleCondition(last_user_contains="queued"), respond=Step(content="my turn came")),
            ],
        )
    )
    start_operator(scenario_name, runs_concurrency=1)
    create_inv(api_client, namespace, "holder", title="hold-the-slot")
    wait_inv(api_client, namespace, "holder", phase_is("Running"))
    create_conv(api_client, namespace, "queued", "Am I queued?")
    waiting = wait_conv(
        api_client, namespace, "queued", lambda o: "free run slot" in ((o.get("status") or {}).get("message") or "")
    )
    assert waiting["status"]["phase"] == "Pending"
    assert conditions(waiting)["Answered"]["reason"] == "WaitingForSlot"
    done = wait_conv(api_client, namespace, "queued", all_answered(1))
    assert done["status"]["turns"][0]["answer"] == "my turn came"
    assert wait_inv(api_client, namespace, "holder", phase_is("Succeeded", "Failed"))["status"]["phase"] == "Succeeded"


@pytest.mark.parametrize("policy", ["last_n", "summary"])
async def test_a_conversation_of_fifty_turns_keeps_working_inside_a_small_window(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    policy: str,
) -> None:
    from opkit import test_registry

    from lestrade.operator.agent.tokens import token_breakdown
    from lestrade.operator.tools.base import ToolOutput, ToolRegistry, Toolset

    class BigReport:
        name = "big_report"
        description = "A long report."
        parameters = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

        def needs_approval(self, params: dict[str, Any]) -> bool:
            return False

        def describe(self, params: dict[str, Any]) -> str:
            return f"report {params.get('n')}"

        async def run(self, params: dict[str, Any]) -> ToolOutput:
            lines = [f"report {params['n']} line {i}: all systems nominal" for i in range(400)]
            return ToolOutput(status="success", data="\n".join(lines))

    def tools(client: Any) -> ToolRegistry:
        base = test_registry(client)
        return ToolRegistry([*base.toolsets, Toolset("reports", [BigReport()])])

    budget = 8000
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            step_counting="turn",
            rules=[
                Rule(
                    when=RuleCondition(system_contains="conversation summarizer"),
                    respond=Step(content="<analysis>Earlier turns read report 1; all nominal.</analysis>"),
                ),
            ],
            steps=[
                Step(tool_calls=[ToolCall(id="r", name="big_report", arguments={"n": 1})]),
                Step(content="Report read: {{ match('line 0: (.*)', tool='big_report') }}"),
            ],
        )
    )
    start_operator(scenario_name, tools=tools)
    turns = [f"Question {i}: read the report." for i in range(50)]
    context: dict[str, Any] = {"tokenBudget": budget, "triggerRatio": 0.6}
    if policy != "summary":  # the default: a model-written summary of older messages
        context["compaction"] = {"policy": policy, "limit": 6}
    create_conv(api_client, namespace, "long", *turns, context=context)
    done = await asyncio.to_thread(wait_conv, api_client, namespace, "long", all_answered(50), 600)
    status = done["status"]
    assert turn_phases(done) == ["Answered"] * 50, [t.get("message") for t in status["turns"]]
    assert status["answeredTurns"] == 50
    assert all(t["answer"] == "Report read: all systems nominal" for t in status["turns"][-3:])
    assert len(json.dumps(status)) < 256 * 1024

    # What the model saw stayed inside the budget, every turn.
    requests = model_server.requests(scenario_name)
    summaries = [r for r in requests if "conversation summarizer" in r["messages"][0]["content"]]
    assert len(requests) - len(summaries) == 100
    assert (len(summaries) >= 10) if policy == "summary" else not summaries
    sizes = [token_breakdown(r["messages"], [], "")["total_tokens"] for r in requests]
    assert max(sizes) <= budget, max(sizes)
    # ... and nothing was lost: the raw log still has every ask and every report.
    state = conv_transcript(api_client, done)
    assert len(state.compactions) >= 10
    asks = [m["content"] for m in state.messages if m["role"] == "user"]
    assert [a.split("\n")[0] for a in asks] == turns
    reports = [m["content"] for m in state.messages if m["role"] == "tool"]
    assert len(reports) == 50
    assert status["version"] == len(state.messages) + len(state.compactions)


def test_tool_results_show_in_status_and_transcript_while_the_model_still_thinks(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    tag = unique("visible")
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(tool_calls=[probe("p-1", namespace, tag)]),
                Step(content="slow answer", latency_ms=60_000),
            ],
        )
    )
    start_operator(scenario_name)
    create_conv(api_client, namespace, "live", "Probe, then think.")
    # system, ask, the call, its result: version 4, with the call's outcome
    seen = wait_conv(
        api_client,
        namespace,
        "live",
        lambda o: (
            (o.get("status") or {}).get("version", 0) >= 4
            and any(c.get("status") == "success" for c in o["status"].get("toolCalls") or [])
        ),
    )
    assert seen["status"]["phase"] == "Running"  # the answer is still a minute away

    def stored() -> bool:
        kinds = [r.type for r in progress_records(conv_transcript(api_client, seen))]
        return "tool_result" in kinds and kinds.count("message") >= 4

    wait_until("the tool result in the transcript", stored, timeout=30, interval=0.1)
    k8s.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, CONV_PLURAL, "live")


def test_a_turn_that_times_out_waiting_for_approval_settles_from_its_transcript(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            rules=[
                Rule(
                    when=RuleCondition(last_user_contains="Fix"),
                    respond=Step(
                        tool_calls=[
                            ToolCall(id="fix-late", name="apply_fix", arguments={"namespace": namespace, "tag": tag})
                        ]
                    ),
                ),
                Rule(when=RuleCondition(last_user_contains="else"), respond=Step(content="Something else.")),
            ],
        )
    )
    start_operator(scenario_name)
    create_conv(api_client, namespace, "late", "Fix it.", timeout="8s")
    paused = wait_conv(api_client, namespace, "late", phase_is("AwaitingApproval", "Failed"))
    assert paused["status"]["phase"] == "AwaitingApproval"
    failed = wait_conv(api_client, namespace, "late", all_answered(1), timeout=60)
    (turn,) = failed["status"]["turns"]
    assert turn["phase"] == "Failed" and "timeout" in turn["message"]
    assert [(c["id"], c["status"]) for c in failed["status"]["toolCalls"]] == [("fix-late", "error")]
    assert failed["status"]["pendingApprovals"] == []
    assert conv_transcript(api_client, failed).records[-1]["t"] == "error"

    # The next turn closes the call that waited, never runs it.
    ask(api_client, namespace, "late", "Something else?")
    done = wait_conv(api_client, namespace, "late", all_answered(2))
    assert done["status"]["turns"][1]["answer"] == "Something else."
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 0
    results = [m for m in conv_transcript(api_client, done).messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in results] == [("fix-late", NOT_RUN)]
