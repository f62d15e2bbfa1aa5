"""The messages a run's result becomes (pure logic): payload v1 against its published JSON
Schema, Slack's Block Kit and Teams' Adaptive Card against their documented structure
(`deliverykit.py`), hostile text kept inert, signatures, and what is due when."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from deliverykit import check_slack_message, check_teams_message

from lestrade.operator.delivery.due import due_messages, has_finding
from lestrade.operator.delivery.payload import build_payload
from lestrade.operator.delivery.signing import sign, verify
from lestrade.operator.delivery.slack import APPROVE_ACTION, DENY_ACTION, decided_message, slack_message
from lestrade.operator.delivery.teams import teams_message
from lestrade.operator.delivery.watch import backoff

SCHEMA = json.loads((Path(__file__).parents[2] / "docs/schemas/delivery-v1.json").read_text())
HOSTILE = "<!channel> please <https://evil.example|click the docs> & [docs](https://evil.example) **now**"


def investigation(
    phase: str = "Succeeded", *, deliver: list[dict[str, Any]] | None = None, **status: Any
) -> dict[str, Any]:
    return {
        "kind": "Investigation",
        "metadata": {"name": "web-down", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"title": "KubePodCrashLooping on shop/web-1", "deliver": deliver or [{"destination": "ops"}]},
        "status": {
            "phase": phase,
            "model": "gpt-x",
            "analysis": "The pod crashes: OOMKilled.",
            "sections": {"Findings": "OOMKilled at 512Mi. " + HOSTILE, "Next steps": "Raise the limit"},
            "usage": {"promptTokens": 100, "completionTokens": 20, "totalTokens": 120, "cost": 0.0123},
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "Completed"}],
            **status,
        },
    }


def awaiting(**extra: Any) -> dict[str, Any]:
    return investigation(
        "AwaitingApproval",
        pendingApprovals=[
            {"toolCallId": "call-1", "toolName": "apply_fix", "description": HOSTILE, "digest": "sha256:ab"},
            {"toolCallId": "call-2", "toolName": "restart", "description": "restart web", "digest": "sha256:cd"},
        ],
        **extra,
    )


@pytest.mark.parametrize("body", [investigation(), investigation("Failed"), awaiting()])
def test_payloads_follow_the_published_schema(body: dict[str, Any]) -> None:
    (due,) = due_messages(body)
    payload = build_payload(body, due, console_url="https://lestrade.example")
    jsonschema.validate(payload, SCHEMA, format_checker=jsonschema.FormatChecker())
    assert payload["id"] == f"u-1/{due.event}/ops"
    assert payload["run"]["url"] == "https://lestrade.example/#/run/investigations/shop/web-down"
    assert payload["run"]["usage"]["cost"] == 0.0123


def test_the_schema_refuses_what_v1_does_not_say() -> None:
    payload = build_payload(investigation(), due_messages(investigation())[0])
    for broken in (
        {**payload, "version": "v2"},
        {**payload, "status": "done"},
        {k: v for k, v in payload.items() if k != "id"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)


@pytest.mark.parametrize("body", [investigation(), investigation("Failed", message="model unreachable"), awaiting()])
def test_slack_messages_are_valid_block_kit(body: dict[str, Any]) -> None:
    payload = build_payload(body, due_messages(body)[0], console_url="https://lestrade.example")
    message = slack_message(payload)
    check_slack_message(message)
    text = json.dumps(message)
    assert "<!channel>" not in text and "<https://evil" not in text  # escaped: no mention, no fake link
    assert "&lt;!channel&gt;" in text
    header = message["blocks"][0]
    assert header["type"] == "header" and header["text"]["text"] == "KubePodCrashLooping on shop/web-1"


def test_slack_approval_buttons_name_the_run_and_the_exact_call() -> None:
    payload = build_payload(awaiting(), due_messages(awaiting())[0])
    message = slack_message(payload)
    buttons = [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"] if "value" in e]
    assert [b["action_id"] for b in buttons] == [APPROVE_ACTION, DENY_ACTION] * 2
    values = [json.loads(b["value"]) for b in buttons]
    assert values[0] == {
        "kind": "Investigation",
        "namespace": "shop",
        "name": "web-down",
        "uid": "u-1",
        "call": "call-1",
        "digest": "sha256:ab",
    }
    assert values[2]["call"] == "call-2"
    decided = decided_message(payload, "alice@example.com", approved=True)
    check_slack_message(decided)
    assert "approved by *alice@example.com*" in json.dumps(decided)
    assert not [b for b in decided["blocks"] if b["type"] == "actions" and any("value" in e for e in b["elements"])]


def test_slack_long_results_stay_within_the_limits() -> None:
    sections = {f"Section {i}": "x" * 10_000 for i in range(80)}
    body = investigation(sections=sections, analysis="y" * 100_000)
    message = slack_message(build_payload(body, due_messages(body)[0], console_url="https://lestrade.example"))
    check_slack_message(message)
    assert 40 <= len(message["blocks"]) <= 50  # sections dropped, not the message refused
    assert message["blocks"][-1]["type"] == "context"  # the link and the id are never cut off
    assert any(e.get("url") for b in message["blocks"] if b["type"] == "actions" for e in b["elements"])


@pytest.mark.parametrize(
    "body",
    [
        investigation(),
        investigation("Failed", message="x"),
        awaiting(),
        investigation(sections={"A": "z" * 60_000}, analysis="a" * 60_000),
    ],
)
def test_teams_messages_are_adaptive_cards_teams_renders(body: dict[str, Any]) -> None:
    message = teams_message(build_payload(body, due_messages(body)[0], console_url="https://lestrade.example"))
    check_teams_message(message)
    text = json.dumps(message)
    assert "[docs](https://evil" not in text
    card = message["attachments"][0]["content"]
    facts = {f["title"]: f["value"] for b in card["body"] if b["type"] == "FactSet" for f in b["facts"]}
    assert facts["Phase"] == body["status"]["phase"] and facts["Cost"].startswith("$0.0123")
    assert card["actions"][0]["url"] == "https://lestrade.example/#/run/investigations/shop/web-down"


def test_signatures_cover_timestamp_and_body() -> None:
    body, now = b'{"a":1}', int(time.time())
    signature = sign(b"k", now, body)
    assert verify(b"k", str(now), body, signature, now=now)
    assert not verify(b"k", str(now), body + b" ", signature, now=now)
    assert not verify(b"other", str(now), body, signature, now=now)
    assert not verify(b"k", str(now - 600), body, sign(b"k", now - 600, body), now=now)  # a replay


@pytest.mark.parametrize(
    ("answer", "sections", "found"),
    [
        ("Nothing found.", None, False),
        ("**None**", None, False),
        ("No issues found: every pod is ready.", None, False),
        ("The pod web-1 crash-loops.", None, True),
        ("long text", {"Findings": "None."}, False),
        ("", {"Findings": "web-1 is OOMKilled"}, True),
        ("Nonetheless web-1 fails.", None, True),
    ],
)
def test_what_counts_as_a_finding(answer: str, sections: dict[str, str] | None, found: bool) -> None:
    assert has_finding(answer, sections) is found


def test_conditions_decide_what_is_due() -> None:
    targets = [
        {"destination": "all"},
        {"destination": "fail", "when": "OnFailure"},
        {"destination": "find", "when": "OnFinding"},
    ]
    quiet = investigation(deliver=targets, sections={"Findings": "None"})
    assert [d.destination for d in due_messages(quiet)] == ["all"]
    found = investigation(deliver=targets)
    assert [d.destination for d in due_messages(found)] == ["all", "find"]
    failed = investigation("Failed", deliver=targets)
    assert [d.destination for d in due_messages(failed)] == ["all", "fail", "find"]
    assert due_messages(investigation("Running", deliver=targets)) == []
    pause = due_messages(awaiting(spec=None))
    assert [(d.destination, d.status) for d in pause] == [("ops", "firing")]
    assert pause[0].event.startswith("approval-")


def test_a_conversation_owes_its_latest_turn_only() -> None:
    body = {
        "kind": "Conversation",
        "metadata": {"name": "c", "namespace": "n", "uid": "u"},
        "spec": {"turns": [{"ask": "a"}, {"ask": "b"}], "deliver": [{"destination": "ops"}]},
        "status": {
            "turns": [
                {"ask": "a", "phase": "Answered", "answer": "x"},
                {"ask": "b", "phase": "Answered", "answer": "y"},
            ]
        },
    }
    (due,) = due_messages(body)
    assert (due.id, due.turn) == ("u/turn-1/ops", 1)
    payload = build_payload(body, due)
    jsonschema.validate(payload, SCHEMA)
    assert payload["run"]["title"] == "b" and payload["run"]["analysis"] == "y"


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(2, n) for n in (1, 2, 3)] == [2, 4, 8]
    assert backoff(2, 30) == 600


def test_alert_routes_and_schedules_pass_their_destinations_on() -> None:
    """An AlertRoute's template and a ScheduledInvestigation's spec.investigation name
    destinations; the Investigations they create carry them (and so are delivered)."""
    from datetime import UTC, datetime

    from lestrade.resources.alertroute import AlertRoute
    from lestrade.resources.scheduled import ScheduledInvestigation
    from lestrade.triggers import Alert
    from lestrade.triggers.dispatch import investigation_manifest

    deliver = [{"destination": "ops", "when": "OnFinding"}]
    route = AlertRoute.model_validate(
        {
            "metadata": {"name": "crash", "namespace": "shop"},
            "spec": {
                "matchers": [],
                "alertNamespace": "Any",
                "investigation": {"title": "{{ labels.alertname }}", "deliver": deliver},
            },
        }
    )
    alert = Alert(
        labels={"alertname": "KubePodCrashLooping"}, given_fingerprint="f", starts_at=datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert investigation_manifest(route, "crash-x", alert)["spec"]["deliver"] == deliver
    schedule = ScheduledInvestigation.model_validate(
        {
            "metadata": {"name": "daily"},
            "spec": {"schedule": "@daily", "investigation": {"title": "healthy?", "deliver": deliver}},
        }
    )
    assert schedule.spec.investigation.to_wire()["deliver"] == deliver
