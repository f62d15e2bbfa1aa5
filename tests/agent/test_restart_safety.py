"""What a restart does with calls of an interrupted turn, and how a turn announces its calls.

A call that may have launched is reported as "outcome unknown" unless its tool declares it
read-only (by toolset or per call): then it simply runs again and the model gets its result.
All intents of a turn are announced (`ToolStarted`… then `ToolsStarting`) before any call runs;
a call that may have an effect is handed to `before_launch` right before it runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_support import FakeTool, collect, final, of_kind

from lestrade.operator.agent.toolcalls import Call
from lestrade.operator.agent.turn import OUTCOME_UNKNOWN
from lestrade.operator.tools.base import ToolRegistry, Toolset
from lestrade.runs.transcript import RecordType, TranscriptState


def _interrupted(agent: Any, *calls: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A stored conversation whose last assistant turn asked for `calls` (id, name, params)."""
    return agent.initial_messages("look and fix") + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(p)}} for i, n, p in calls
            ],
        }
    ]


async def test_a_read_only_call_that_may_have_run_is_run_again_with_its_real_result(harness) -> None:
    harness.scenario(steps=[{"content": "after restart: {{ tool_outputs() | join(' | ') }}"}])
    read = FakeTool("read", lambda p: f"pods in {p['x']}")
    write = FakeTool("write", lambda p: "written")
    agent = harness.agent(
        ToolRegistry(
            [
                Toolset("reads", [read], read_only=True),
                Toolset("writes", [write]),
            ]
        )
    )
    stored = _interrupted(agent, ("r1", "read", {"x": "shop"}), ("w1", "write", {"x": "a"}))
    events = await collect(agent.run(stored, started_call_ids={"r1", "w1"}))
    assert read.calls == [{"x": "shop"}] and write.calls == []
    results = {r.call_id: r.output for r in of_kind(events, "tool_result")}
    assert results == {"r1": "pods in shop", "w1": OUTCOME_UNKNOWN}
    assert final(events).text == f"after restart: pods in shop | {OUTCOME_UNKNOWN}"


async def test_a_tool_may_declare_only_some_calls_read_only(harness) -> None:
    harness.scenario(steps=[{"content": "{{ tool_outputs() | join(' | ') }}"}])
    shell = FakeTool("shell", lambda p: f"ran {p['x']}")
    shell.read_only = lambda params: params.get("x", "").startswith("get")  # type: ignore[attr-defined]
    agent = harness.agent(ToolRegistry([Toolset("shell", [shell])]))
    stored = _interrupted(agent, ("a", "shell", {"x": "get pods"}), ("b", "shell", {"x": "rm -rf"}))
    events = await collect(agent.run(stored, started_call_ids={"a", "b"}))
    assert shell.calls == [{"x": "get pods"}]
    assert final(events).text == f"ran get pods | {OUTCOME_UNKNOWN}"
    assert ToolRegistry([Toolset("shell", [shell])]).is_read_only("shell", None) is False


async def test_a_turn_announces_every_intent_before_any_call_runs_and_marks_launches(harness) -> None:
    harness.scenario(
        steps=[
            {
                "tool_calls": [
                    {"name": "read", "arguments": {"x": "1"}},
                    {"name": "write", "arguments": {"x": "2"}},
                    {"name": "read", "arguments": {"x": "3"}},
                ]
            },
            {"content": "done"},
        ]
    )
    log: list[str] = []
    read = FakeTool("read", lambda p: log.append(f"run read {p['x']}") or "r")
    write = FakeTool("write", lambda p: log.append(f"run write {p['x']}") or "w")
    agent = harness.agent(ToolRegistry([Toolset("reads", [read], read_only=True), Toolset("writes", [write])]))

    async def before_launch(call: Call) -> None:
        log.append(f"launch {call.name} {call.params['x']}")

    stream = agent.run(agent.initial_messages("go"), before_launch=before_launch)
    async for event in stream:
        if event.kind == "tool_started":
            log.append(f"intent {event.name} read_only={event.read_only}")
        elif event.kind == "tools_starting":
            log.append(f"starting {len(event.call_ids)}")
    intents = log[:4]
    assert intents == [
        "intent read read_only=True",
        "intent write read_only=False",
        "intent read read_only=True",
        "starting 3",
    ]
    # Only the call that may have an effect is marked, and before it runs.
    assert log.count("launch write 2") == 1 and not any(e.startswith("launch read") for e in log)
    assert log.index("launch write 2") < log.index("run write 2")
    assert sorted(log[4:]) == sorted(["run read 1", "launch write 2", "run write 2", "run read 3"])


async def test_a_call_whose_launch_mark_fails_does_not_run(harness) -> None:
    harness.scenario(steps=[{"tool_calls": [{"name": "write", "arguments": {"x": "2"}}]}, {"content": "x"}])
    write = FakeTool("write", lambda p: "w")
    agent = harness.agent(ToolRegistry([Toolset("writes", [write])]))

    async def refused(call: Call) -> None:
        raise PermissionError("fenced: another replica owns this run")

    with pytest.raises(PermissionError):
        await collect(agent.run(agent.initial_messages("go"), before_launch=refused))
    assert write.calls == []


def test_an_intent_without_a_launch_mark_never_ran_but_an_old_started_record_may_have() -> None:
    state = TranscriptState()
    for record in (
        {"t": RecordType.TOOL_STARTED, "id": "a", "digest": "d", "intent": True},
        {"t": RecordType.TOOL_STARTED, "id": "b", "digest": "d", "intent": True},
        {"t": RecordType.TOOL_LAUNCHED, "id": "b", "digest": "d"},
        {"t": RecordType.TOOL_STARTED, "id": "old", "digest": "d"},  # written before intents existed
    ):
        state.apply(dict(record))
    assert state.started == {"a", "b", "old"}
    assert state.launched == {"b", "old"}


def test_an_mcp_tool_is_read_only_only_when_its_server_is_trusted_and_says_so() -> None:
    from types import SimpleNamespace

    from lestrade.operator.tools.mcp import Policy, build_catalog
    from lestrade.operator.tools.mcp.toolset import mcp_tool

    def tool(name: str, **hints: bool) -> Any:
        return SimpleNamespace(
            name=name,
            description=name,
            inputSchema={"type": "object", "properties": {}},
            annotations=SimpleNamespace(**hints) if hints else None,
        )

    listed = [tool("get_pods", readOnlyHint=True), tool("wipe", readOnlyHint=True, destructiveHint=True), tool("plain")]
    for trusted, expected in ((True, {"srv__get_pods"}), (False, set())):
        infos, _ = build_catalog("srv", listed, Policy(trust_hints=trusted))
        tools = [mcp_tool("srv", info, lambda: None) for info in infos]
        registry = ToolRegistry([Toolset("mcp", tools)])
        assert {t.name for t in tools if registry.is_read_only(t.name, {})} == expected
