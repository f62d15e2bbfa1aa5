"""The pydantic models read raw Kubernetes objects and write camelCase patches."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from lestrade.resources import (
    API_VERSION,
    Condition,
    Conversation,
    ConversationSpec,
    Investigation,
    InvestigationPhase,
    InvestigationSpec,
    InvestigationStatus,
    Usage,
    condition,
    find_condition,
    parse_duration,
    set_condition,
)

RAW_INVESTIGATION = {
    "apiVersion": "lestrade.dev/v1alpha1",
    "kind": "Investigation",
    "metadata": {"name": "crash", "namespace": "shop", "uid": "u-1", "generation": 2},
    "spec": {
        "title": "KubePodCrashLooping",
        "subject": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
        "maxSteps": 12,
        "timeout": "1h30m",
        "decisions": {"call_1": {"approved": False, "reason": "not in prod"}},
        "someFutureField": "ignored",
    },
    "status": {
        "phase": "AwaitingApproval",
        "steps": 3,
        "toolCalls": [{"id": "call_1", "name": "bash", "params": {"command": "rm -rf /"}}],
        "pendingApprovals": [{"toolCallId": "call_1", "toolName": "bash", "params": {"command": "rm -rf /"}}],
        "usage": {"promptTokens": 10, "completionTokens": 5, "totalTokens": 15, "cost": 0.01},
        "conditions": [
            {
                "type": "Succeeded",
                "status": "Unknown",
                "reason": "Running",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    },
}


def test_investigation_reads_a_raw_object() -> None:
    inv = Investigation.model_validate(RAW_INVESTIGATION)
    assert inv.name == "crash" and inv.namespace == "shop"
    assert inv.spec.title == "KubePodCrashLooping"
    assert inv.spec.source == "kubernetes"
    assert inv.spec.enable_tool_approval is True
    assert inv.spec.subject == {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}}
    assert inv.spec.timeout_seconds() == 5400
    assert inv.spec.decisions is not None
    assert inv.spec.decisions["call_1"].approved is False
    assert inv.status.phase is InvestigationPhase.AWAITING_APPROVAL
    assert inv.status.phase == "AwaitingApproval"
    assert inv.status.pending_approvals[0].params == {"command": "rm -rf /"}
    assert inv.status.usage == Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15, cost=0.01)
    assert inv.status.conditions[0].last_transition_time == datetime(2026, 1, 1, tzinfo=UTC)


def test_investigation_without_status_gets_an_empty_one() -> None:
    inv = Investigation.model_validate({"spec": {"title": "x"}})
    assert inv.status.phase is None
    assert inv.status.steps == 0
    assert inv.api_version == API_VERSION


def test_status_to_wire_is_camel_case_and_omits_unset_fields() -> None:
    status = InvestigationStatus(
        phase=InvestigationPhase.RUNNING, steps=2, tool_call_count=1, usage=Usage(total_tokens=7)
    )
    wire = status.to_wire()
    assert wire["phase"] == "Running"
    assert wire["toolCallCount"] == 1
    assert wire["usage"]["totalTokens"] == 7
    assert "analysis" not in wire and "startTime" not in wire


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"title": ""},
        {"title": "t", "maxSteps": 0},
        {"title": "t", "maxSteps": 101},
        {"title": "t", "timeout": "ten minutes"},
        {"title": "t", "timeout": "10"},
        {"title": "t", "ttlSecondsAfterFinished": -1},
        {"title": "t", "decisions": {"call_1": {"reason": "no approved field"}}},
    ],
)
def test_invalid_investigation_specs_are_rejected(spec: dict) -> None:
    with pytest.raises(ValidationError):
        InvestigationSpec.model_validate(spec)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("1h30m", 5400), ("250ms", 0.25)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")


def test_conversation_reads_turns_and_context_settings() -> None:
    conv = Conversation.model_validate(
        {
            "metadata": {"name": "chat"},
            "spec": {
                "turns": [{"ask": "why is web-1 crashing?"}, {"ask": "and web-2?"}],
                "context": {"tokenBudget": 8000, "compaction": {"policy": "last_n", "limit": 40}},
            },
            "status": {
                "version": 4,
                "turns": [{"ask": "why is web-1 crashing?", "answer": "OOM", "phase": "Answered"}],
            },
        }
    )
    assert [t.ask for t in conv.spec.turns] == ["why is web-1 crashing?", "and web-2?"]
    assert conv.spec.context is not None
    assert conv.spec.context.trigger_ratio == 0.7
    assert conv.spec.context.compaction is not None
    assert conv.spec.context.compaction.limit == 40
    assert conv.status.version == 4
    assert conv.status.turns[0].phase == "Answered"


@pytest.mark.parametrize("ratio", [0, -0.1, 1.01])
def test_trigger_ratio_bounds(ratio: float) -> None:
    with pytest.raises(ValidationError):
        ConversationSpec.model_validate({"context": {"triggerRatio": ratio}})


def test_condition_builder_and_set_condition_keep_transition_time() -> None:
    early = datetime(2026, 1, 1, tzinfo=UTC)
    running = condition("Succeeded", "Unknown", "Running", "started", now=early)
    assert running.to_wire() == {
        "type": "Succeeded",
        "status": "Unknown",
        "reason": "Running",
        "message": "started",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    still_running = condition("Succeeded", "Unknown", "Running", "step 2")
    conditions = set_condition([running], still_running)
    assert len(conditions) == 1
    assert conditions[0].message == "step 2"
    assert conditions[0].last_transition_time == early  # no transition, time kept

    done = condition("Succeeded", True, "Completed", "analysis written")
    conditions = set_condition(conditions, done)
    assert conditions[0].status == "True"
    assert conditions[0].last_transition_time > early

    conditions = set_condition(conditions, condition("AwaitingApproval", False, "NoPending"))
    assert [c.type for c in conditions] == ["Succeeded", "AwaitingApproval"]
    found = find_condition(conditions, "AwaitingApproval")
    assert isinstance(found, Condition) and found.status == "False"
    assert find_condition(conditions, "Missing") is None


def test_condition_reason_must_be_a_camel_case_word() -> None:
    with pytest.raises(ValidationError):
        condition("Succeeded", True, "not a word")


def test_manifest_is_what_to_create() -> None:
    inv = Investigation(
        metadata={"name": "crash", "namespace": "shop"},
        spec=InvestigationSpec(title="t", max_steps=3),
    )
    assert inv.manifest() == {
        "apiVersion": "lestrade.dev/v1alpha1",
        "kind": "Investigation",
        "metadata": {"name": "crash", "namespace": "shop"},
        "spec": {"title": "t", "source": "kubernetes", "maxSteps": 3, "enableToolApproval": True},
    }
    conv = Conversation(metadata={"name": "chat"}, spec=ConversationSpec(turns=[{"ask": "hi"}]))
    assert conv.manifest()["spec"] == {"turns": [{"ask": "hi"}], "enableToolApproval": True}
