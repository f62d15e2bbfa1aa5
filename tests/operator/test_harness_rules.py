"""The permission rules of a harness session (pure: the gate's rule step on a transcript that is
only buffered, never stored). The relay step and everything end to end: tests/api/test_harness_*."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lestrade.operator.agent.toolcalls import Call
from lestrade.operator.harness.gate import MAIN_AGENT, AgentTag, Gate, rule_matches
from lestrade.resources.conversation import HarnessSettings, ToolPermission
from lestrade.runs.transcript import RecordType, Transcript

OWNER = {"apiVersion": "lestrade.dev/v1alpha1", "kind": "Conversation", "name": "c", "uid": "u"}


def call(call_id: str, name: str, **params: Any) -> Call:
    return Call(call_id, name, json.dumps(params), params)


class NoWatch:
    """The gate reads the newest spec from its watch; here there is none yet."""

    def spec(self) -> None:
        return None


def gate(permissions: dict[str, Any], transcript: Transcript | None = None) -> Gate:
    settings = HarnessSettings.model_validate({"permissions": permissions})
    return Gate(
        transcript=transcript or Transcript(None, "ns", OWNER),  # type: ignore[arg-type]
        projection=None,
        settings=settings,
        watch=NoWatch(),
        sync=None,
        kubectl_hint="",  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("rule", "name", "params", "expected"),
    [
        ({"tool": "kubectl_logs"}, "kubectl_logs", {"name": "web"}, True),
        ({"tool": "kubectl_logs"}, "kubectl_describe", {}, False),
        ({"tool": "kubectl_*"}, "kubectl_describe", {}, True),
        ({"tool": "bash", "params": {"command": "kubectl get *"}}, "bash", {"command": "kubectl get pods"}, True),
        ({"tool": "bash", "params": {"command": "kubectl get *"}}, "bash", {"command": "rm -rf /"}, False),
        # issue 29: per parsed stage, with the bash tool's parser: a glob allows no other stage
        (
            {"tool": "bash", "params": {"command": "kubectl get *"}},
            "bash",
            {"command": "kubectl get x; sh -c 'touch y'"},
            False,
        ),
        ({"tool": "bash", "params": {"command": "kubectl get *"}}, "bash", {"command": "kubectl get x | sh"}, False),
        (
            {"tool": "bash", "params": {"command": "kubectl get *"}},
            "bash",
            {"command": "kubectl get x && rm -rf /"},
            False,
        ),
        (
            {"tool": "bash", "params": {"command": "kubectl get *"}},
            "bash",
            {"command": "kubectl get x\nrm -rf /"},
            False,
        ),
        ({"tool": "bash", "params": {"command": "kubectl get *"}}, "bash", {"command": "kubectl get $(id)"}, False),
        ({"tool": "bash", "params": {"command": "kubectl get *"}}, "bash", {"command": "kubectl get x'"}, False),
        (
            {"tool": "bash", "params": {"command": "kubectl get *"}},
            "bash",
            {"command": "kubectl get 'x; sh'"},
            True,
        ),  # one argument
        (
            {"tool": "bash", "params": {"command": "kubectl get *|grep *"}},
            "bash",
            {"command": "kubectl get x | grep y"},
            False,
        ),
        # A parameter the rule names but the call lacks never matches.
        ({"tool": "bash", "params": {"command": "*"}}, "bash", {}, False),
        # Globs are case-sensitive; non-string values are matched as JSON text.
        ({"tool": "x", "params": {"n": "WEB*"}}, "x", {"n": "web-1"}, False),
        ({"tool": "x", "params": {"n": "[0-9]"}}, "x", {"n": 7}, True),
        ({"tool": "x", "params": {"flag": "true"}}, "x", {"flag": True}, True),
    ],
)
def test_rule_matching(rule: dict[str, Any], name: str, params: dict[str, Any], expected: bool) -> None:
    assert rule_matches(ToolPermission.model_validate(rule), name, params) is expected


def test_deny_wins_over_allowlist_and_each_verdict_is_recorded_with_its_rule() -> None:
    g = gate({"allowlist": [{"tool": "probe"}], "deny": [{"toolCallId": "c-2", "reason": "no"}]})
    assert g.by_rules(call("c-1", "probe"), MAIN_AGENT) == (True, None)
    assert g.by_rules(call("c-2", "probe"), MAIN_AGENT) == (False, "no")
    assert g.by_rules(call("c-3", "other"), MAIN_AGENT) is None  # no rule: a relay
    decisions = [r for r in g.transcript.state.records if r["t"] == RecordType.DECISION]
    assert [(d["id"], d["approved"], d["rule"]) for d in decisions] == [
        ("c-1", True, "allowlist[0]"),
        ("c-2", False, "deny"),
    ]


def test_allow_once_is_spent_and_stays_spent_for_a_later_attempt() -> None:
    transcript = Transcript(None, "ns", OWNER)  # type: ignore[arg-type]
    rules = {"allowOnce": [{"tool": "probe", "params": {"tag": "a*"}}, {"tool": "probe"}]}
    first = gate(rules, transcript)
    assert first.by_rules(call("c-1", "probe", tag="ab"), MAIN_AGENT) == (True, None)  # rule 0
    assert first.by_rules(call("c-2", "probe", tag="ac"), MAIN_AGENT) == (True, None)  # rule 1
    assert first.by_rules(call("c-3", "probe", tag="ad"), MAIN_AGENT) is None  # both spent
    # A new attempt (after a restart) reads what was spent from the transcript's records.
    again = Transcript(None, "ns", OWNER)  # type: ignore[arg-type]
    for record in transcript.state.records:
        again.state.apply(record)
    later = gate(rules, again)
    assert later.by_rules(call("c-4", "probe", tag="ae"), MAIN_AGENT) is None
    # A decision recorded before the restart is the call's verdict, whatever the rules say now.
    assert later.by_rules(call("c-1", "probe", tag="ab"), MAIN_AGENT) == (True, None)


def test_a_subagents_decisions_carry_its_tag() -> None:
    g = gate({"allowlist": [{"tool": "probe"}]})
    child = AgentTag("agent-s1", "s1", 1)
    g.by_rules(call("c-1", "probe"), child)
    [record] = g.transcript.state.records
    assert (record["agentId"], record["parentId"], record["depth"]) == ("agent-s1", "s1", 1)


class RecordingGate:
    """Stands in for the relay step: records whether the call had to go to a person."""

    def __init__(self, permissions: dict[str, Any]) -> None:
        self.inner = gate(permissions)
        self.asked: list[bool] = []

    async def decide(
        self, c: Call, tag: AgentTag, description: str, needs_person: bool = False
    ) -> tuple[bool, str | None]:
        self.asked.append(needs_person)
        verdict = self.inner.by_rules(c, tag, may_allow=not needs_person)
        return verdict if verdict is not None else (False, "relayed to a person")


@pytest.mark.parametrize(
    ("command", "by_rule"),
    [
        ("kubectl get pods", True),  # read-only: the rule may allow it
        ("kubectl get pods > /tmp/out", False),  # the bash tool's tier asks a person: so does the gate
        ("kubectl delete pod web", False),
        ("kubectl get pods -o yaml | sh", False),
    ],
)
async def test_a_harness_allow_never_skips_the_bash_tools_approval_tier(command: str, by_rule: bool) -> None:
    from lestrade.operator.harness.gate import GatedTool
    from lestrade.operator.tools.bash.tool import bash_toolset

    [bash] = bash_toolset().tools
    recording = RecordingGate({"allowlist": [{"tool": "bash"}]})
    tool = GatedTool(inner=bash, gate=recording, tag=MAIN_AGENT, timeout=5)  # type: ignore[arg-type]
    c = call("c-1", "bash", command=command)
    output = await tool.run_call(c, c.params)
    assert recording.asked == [not by_rule]
    if not by_rule:
        assert output.status == "denied" and "relayed to a person" in str(output.data)
