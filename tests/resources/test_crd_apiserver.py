"""The CRDs on a real kube-apiserver: validation messages, CEL rules, discovery, columns.

These run against the control plane from `lestrade.testing.cluster_fixtures`; the rules are
only worth anything if the apiserver actually enforces them, so nothing here is mocked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from lestrade.resources import (
    CONVERSATION_PLURAL,
    GROUP,
    INVESTIGATION_PLURAL,
    VERSION,
    Conversation,
    Investigation,
    condition,
    crd_manifests,
    install_crds,
)
from lestrade.resources.rest import JSON_PATCH, MERGE_PATCH, TABLE, request_json

pytestmark = pytest.mark.usefixtures("crds")


class Objects:
    """One namespace and plural of custom objects, as plain JSON dicts in and out."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str, plural: str) -> None:
        self.api_client = api_client
        self.base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return request_json(self.api_client, "POST", self.base, body)

    def get(self, name: str) -> dict[str, Any]:
        return request_json(self.api_client, "GET", f"{self.base}/{name}")

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        return request_json(self.api_client, "PUT", f"{self.base}/{body['metadata']['name']}", body)

    def patch(self, name: str, body: Any, content_type: str = MERGE_PATCH) -> dict[str, Any]:
        return request_json(self.api_client, "PATCH", f"{self.base}/{name}", body, content_type=content_type)

    def patch_status(self, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return request_json(
            self.api_client, "PATCH", f"{self.base}/{name}/status", {"status": status}, content_type=MERGE_PATCH
        )


def rejected(call: Any, *args: Any, **kwargs: Any) -> str:
    """Run a call that the apiserver must refuse; return its error message."""
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    assert info.value.status == 422, info.value.body
    return json.loads(info.value.body)["message"]


@pytest.fixture
def investigations(api_client: k8s.ApiClient, namespace: str) -> Objects:
    return Objects(api_client, namespace, INVESTIGATION_PLURAL)


@pytest.fixture
def conversations(api_client: k8s.ApiClient, namespace: str) -> Objects:
    return Objects(api_client, namespace, CONVERSATION_PLURAL)


def investigation(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Investigation",
        "metadata": {"name": name},
        "spec": {"title": "KubePodCrashLooping", **spec},
    }


def conversation(name: str, *asks: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Conversation",
        "metadata": {"name": name},
        "spec": {"turns": [{"ask": a} for a in asks], **spec},
    }


# --- Investigation: schema validation -------------------------------------------------------


def test_investigation_defaults_are_applied_and_the_model_reads_it(
    investigations: Objects,
) -> None:
    created = investigations.create(
        investigation("ok", subject={"kind": "Pod", "name": "web-1", "extra": {"a": [1, 2]}})
    )
    assert created["spec"]["source"] == "kubernetes"
    assert created["spec"]["enableToolApproval"] is True
    assert created["spec"]["subject"]["extra"] == {"a": [1, 2]}  # free-form kept
    inv = Investigation.model_validate(created)
    assert inv.name == "ok" and inv.spec.title == "KubePodCrashLooping"


def test_investigation_without_title_is_rejected(investigations: Objects) -> None:
    body = investigation("no-title")
    del body["spec"]["title"]
    message = rejected(investigations.create, body)
    assert "spec.title: Required value" in message


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"title": ""}, "spec.title: Invalid value"),
        ({"maxSteps": 0}, "spec.maxSteps: Invalid value: 0"),
        ({"maxSteps": 101}, "spec.maxSteps: Invalid value: 101"),
        ({"timeout": "ten minutes"}, 'spec.timeout: Invalid value: "ten minutes"'),
        ({"ttlSecondsAfterFinished": -5}, "spec.ttlSecondsAfterFinished: Invalid value: -5"),
        ({"decisions": {"call_1": {"reason": "ok"}}}, "spec.decisions.call_1.approved: Required"),
    ],
)
def test_invalid_investigation_is_rejected_with_a_clear_message(
    investigations: Objects, spec: dict[str, Any], expected: str
) -> None:
    message = rejected(investigations.create, investigation("bad", **spec))
    assert expected in message


def test_status_enum_is_enforced(investigations: Objects) -> None:
    investigations.create(investigation("enum"))
    message = rejected(investigations.patch_status, "enum", {"phase": "Done"})
    assert 'status.phase: Unsupported value: "Done"' in message


# --- Investigation: spec frozen once running, except decisions -------------------------------


def test_spec_may_change_while_pending(investigations: Objects) -> None:
    investigations.create(investigation("pending"))
    investigations.patch_status("pending", {"phase": "Pending"})
    patched = investigations.patch("pending", {"spec": {"title": "new title", "maxSteps": 5}})
    assert patched["spec"]["title"] == "new title"


@pytest.mark.parametrize(
    "change",
    [
        {"title": "something else"},
        {"maxSteps": 7},
        {"question": "added later"},
        {"enableToolApproval": False},
        {"subject": {"name": "web-1", "extra": {"a": [1, 3]}}},  # unknown field inside
        {"sections": {"Only": "this"}},
    ],
)
def test_spec_is_frozen_once_running(investigations: Objects, change: dict[str, Any]) -> None:
    investigations.create(
        investigation(
            "frozen",
            maxSteps=5,
            sections={"A": "a"},
            subject={"name": "web-1", "extra": {"a": [1, 2]}},
        )
    )
    investigations.patch_status("frozen", {"phase": "Running"})
    message = rejected(investigations.patch, "frozen", {"spec": change})
    assert "spec is immutable once the investigation is Running" in message
    assert "only spec.decisions may change" in message
    assert investigations.get("frozen")["spec"]["maxSteps"] == 5


def test_removing_a_spec_field_is_rejected_once_running(investigations: Objects) -> None:
    investigations.create(investigation("remove", question="why?"))
    investigations.patch_status("remove", {"phase": "AwaitingApproval"})
    message = rejected(investigations.patch, "remove", [{"op": "remove", "path": "/spec/question"}], JSON_PATCH)
    assert "immutable once the investigation is AwaitingApproval" in message


@pytest.mark.parametrize("finished", ["Succeeded", "Failed"])
def test_a_finished_investigation_stays_finished(investigations: Objects, finished: str) -> None:
    """The operator no longer watches finished Investigations: none may become unfinished."""
    investigations.create(investigation(f"done-{finished.lower()}"))
    name = f"done-{finished.lower()}"
    investigations.patch_status(name, {"phase": "Running"})
    investigations.patch_status(name, {"phase": finished, "message": "done"})
    for phase in ("Pending", "Running", "AwaitingApproval"):
        message = rejected(investigations.patch_status, name, {"phase": phase})
        assert f"status.phase: Forbidden: status.phase is final once the investigation has {finished}" in message
    for removal in ("/status/phase", "/status"):
        message = rejected(
            request_json,
            investigations.api_client,
            "PATCH",
            f"{investigations.base}/{name}/status",
            [{"op": "remove", "path": removal}],
            content_type=JSON_PATCH,
        )
        assert "status.phase is final" in message
    other = "Failed" if finished == "Succeeded" else "Succeeded"
    assert "status.phase is final" in rejected(investigations.patch_status, name, {"phase": other})
    # The rest of status may still be written (the operator's last facts, a repeated final write).
    assert investigations.patch_status(name, {"phase": finished, "message": "again"})["status"]["message"] == "again"


def test_investigations_are_selectable_by_phase_and_ttl(investigations: Objects) -> None:
    """The CRD's selectable fields: what the operator's and its TTL reaper's watches ask for."""
    from lestrade.resources.investigation import FINISHED_WITH_TTL_SELECTORS, UNFINISHED_SELECTOR

    phases = {
        "new": None,
        "running": "Running",
        "waiting": "AwaitingApproval",
        "ok": "Succeeded",
        "bad": "Failed",
        "ok-ttl": "Succeeded",
        "bad-ttl": "Failed",
        "running-ttl": "Running",
    }
    for name, phase in phases.items():
        investigations.create(investigation(name, **({"ttlSecondsAfterFinished": 0} if name.endswith("-ttl") else {})))
        if phase:
            investigations.patch_status(name, {"phase": phase})

    def names(selector: str) -> set[str]:
        listing = request_json(investigations.api_client, "GET", investigations.base, query={"fieldSelector": selector})
        return {i["metadata"]["name"] for i in listing["items"]}

    assert names(UNFINISHED_SELECTOR) == {"new", "running", "waiting", "running-ttl"}
    assert set().union(*(names(s) for s in FINISHED_WITH_TTL_SELECTORS)) == {"ok-ttl", "bad-ttl"}


def test_decisions_and_status_updates_are_accepted_once_running(
    investigations: Objects,
) -> None:
    investigations.create(investigation("approve"))
    investigations.patch_status(
        "approve",
        {
            "phase": "AwaitingApproval",
            "pendingApprovals": [
                {"toolCallId": "call_1", "toolName": "bash", "params": {"command": "ls"}},
                {"toolCallId": "call_2", "toolName": "bash", "params": {"command": "rm x"}},
            ],
            "conditions": [condition("AwaitingApproval", True, "ToolCallNeedsApproval").to_wire()],
        },
    )
    approved = investigations.patch("approve", {"spec": {"decisions": {"call_1": {"approved": True}}}})
    assert approved["spec"]["decisions"] == {"call_1": {"approved": True}}
    investigations.patch("approve", {"spec": {"decisions": {"call_2": {"approved": False, "reason": "no"}}}})
    # The operator keeps writing status through the subresource after the spec froze.
    done = investigations.patch_status(
        "approve",
        {
            "phase": "Succeeded",
            "steps": 4,
            "toolCallCount": 2,
            "analysis": "# Root cause\nOOM",
            "pendingApprovals": None,
            "usage": {"promptTokens": 100, "completionTokens": 20, "totalTokens": 120},
            "conditions": [condition("Succeeded", True, "Completed", "done").to_wire()],
        },
    )
    inv = Investigation.model_validate(done)
    assert inv.status.phase == "Succeeded"
    assert inv.status.usage is not None and inv.status.usage.total_tokens == 120
    assert set(inv.spec.decisions or {}) == {"call_1", "call_2"}
    # A full update that repeats the spec unchanged (what Kopf and kubectl apply do) is fine.
    done["metadata"]["labels"] = {"seen": "yes"}
    assert investigations.replace(done)["metadata"]["labels"] == {"seen": "yes"}


# --- Conversation -------------------------------------------------------------------------


def test_conversation_turns_can_be_appended(conversations: Objects) -> None:
    conversations.create(conversation("chat", "why is web-1 crashing?"))
    patched = conversations.patch(
        "chat",
        {"spec": {"turns": [{"ask": "why is web-1 crashing?"}, {"ask": "and web-2?"}]}},
    )
    conv = Conversation.model_validate(patched)
    assert [t.ask for t in conv.spec.turns] == ["why is web-1 crashing?", "and web-2?"]
    appended = conversations.patch(
        "chat", [{"op": "add", "path": "/spec/turns/-", "value": {"ask": "thanks"}}], JSON_PATCH
    )
    assert len(appended["spec"]["turns"]) == 3


@pytest.mark.parametrize(
    ("patch", "patch_type"),
    [
        ({"spec": {"turns": [{"ask": "first, rewritten"}, {"ask": "second"}]}}, MERGE_PATCH),
        ({"spec": {"turns": [{"ask": "second"}, {"ask": "first"}]}}, MERGE_PATCH),
        ({"spec": {"turns": [{"ask": "first"}]}}, MERGE_PATCH),
        ({"spec": {"turns": []}}, MERGE_PATCH),
        ([{"op": "remove", "path": "/spec/turns"}], JSON_PATCH),
        ([{"op": "remove", "path": "/spec/turns/0"}], JSON_PATCH),
    ],
)
def test_conversation_turns_cannot_be_changed_or_removed(conversations: Objects, patch: Any, patch_type: str) -> None:
    conversations.create(conversation("chat", "first", "second"))
    message = rejected(conversations.patch, "chat", patch, patch_type)
    assert "spec.turns is append-only" in message
    assert [t["ask"] for t in conversations.get("chat")["spec"]["turns"]] == ["first", "second"]


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({"triggerRatio": 0}, "spec.context.triggerRatio: Invalid value: 0"),
        ({"triggerRatio": 1.5}, "spec.context.triggerRatio: Invalid value: 1.5"),
        ({"tokenBudget": 0}, "spec.context.tokenBudget: Invalid value: 0"),
        ({"compaction": {"policy": "newest"}}, 'Unsupported value: "newest"'),
        ({"compaction": {"policy": "skip_parts"}}, "policy skip_parts needs skipKinds"),
        (
            {"compaction": {"policy": "last_n", "skipKinds": ["tool_result"]}},
            "skipKinds applies only to policy skip_parts",
        ),
    ],
)
def test_invalid_context_settings_are_rejected(conversations: Objects, context: dict[str, Any], expected: str) -> None:
    message = rejected(conversations.create, conversation("ctx", "hi", context=context))
    assert expected in message


def test_context_settings_defaults(conversations: Objects) -> None:
    created = conversations.create(
        conversation(
            "ctx",
            "hi",
            context={"compaction": {"policy": "skip_parts", "skipKinds": ["tool_result"]}},
        )
    )
    assert created["spec"]["context"]["triggerRatio"] == 0.7
    assert created["spec"]["enableToolApproval"] is True


def test_empty_ask_is_rejected(conversations: Objects) -> None:
    message = rejected(conversations.create, conversation("empty", ""))
    assert "spec.turns[0].ask: Invalid value" in message


def test_status_version_never_decreases(conversations: Objects) -> None:
    conversations.create(conversation("ver", "hi"))
    conversations.patch_status("ver", {"phase": "Running", "version": 3})
    conversations.patch_status("ver", {"version": 5})
    message = rejected(conversations.patch_status, "ver", {"version": 4})
    assert "status.version never decreases" in message


# --- Discovery and printer columns -------------------------------------------------------------


def test_discovery_lists_both_kinds_in_the_lestrade_category(api_client: k8s.ApiClient) -> None:
    """`kubectl get lestrade` expands the category from this discovery document."""
    resources = request_json(api_client, "GET", f"/apis/{GROUP}/{VERSION}")["resources"]
    by_name = {r["name"]: r for r in resources}
    for plural, short in (("investigations", "inv"), ("conversations", "conv")):
        assert by_name[plural]["categories"] == ["lestrade"]
        assert by_name[plural]["shortNames"] == [short]
        assert by_name[plural]["namespaced"] is True
        assert f"{plural}/status" in by_name


def _table(api_client: k8s.ApiClient, namespace: str, plural: str) -> dict[str, Any]:
    """What `kubectl get` receives: the server-side Table with the printer columns."""
    return request_json(
        api_client,
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}",
        accept=TABLE,
    )


def test_printer_columns_show_progress(
    api_client: k8s.ApiClient, namespace: str, investigations: Objects, conversations: Objects
) -> None:
    investigations.create(investigation("cols"))
    investigations.patch_status(
        "cols",
        {
            "phase": "Running",
            "steps": 3,
            "toolCallCount": 2,
            "usage": {"totalTokens": 1234},
            "requester": {"username": "jane", "groups": ["sre"]},
            "groundedFindings": "4/5",
        },
    )
    table = _table(api_client, namespace, INVESTIGATION_PLURAL)
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == [
        "Name",
        "Phase",
        "Steps",
        "Tools",
        "Tokens",
        "Grounded",
        "Model",
        "Title",
        "Requester",
        "Message",
        "Age",
    ]
    row = dict(zip(names, table["rows"][0]["cells"], strict=True))
    assert (row["Name"], row["Phase"], row["Steps"], row["Tools"], row["Tokens"], row["Grounded"]) == (
        "cols",
        "Running",
        3,
        2,
        1234,
        "4/5",
    )
    assert row["Requester"] == "jane"

    conversations.create(conversation("cols", "hi"))
    conversations.patch_status("cols", {"phase": "Answered", "askedTurns": 2, "answeredTurns": 1, "version": 2})
    table = _table(api_client, namespace, CONVERSATION_PLURAL)
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == [
        "Name",
        "Phase",
        "Asked",
        "Answered",
        "Version",
        "Tokens",
        "Model",
        "Requester",
        "Source",
        "User",
        "Message",
        "Age",
    ]
    row = dict(zip(names, table["rows"][0]["cells"], strict=True))
    assert (row["Phase"], row["Asked"], row["Answered"], row["Version"]) == ("Answered", 2, 1, 2)


def test_installing_again_replaces_the_crds_in_place(api_client: k8s.ApiClient) -> None:
    install_crds(api_client, wait=True, timeout=60)  # the fixture installed them once already
    for manifest in crd_manifests():
        name = manifest["metadata"]["name"]
        stored = request_json(api_client, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        established = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert established["Established"] == "True"
        version, expected = stored["spec"]["versions"][0], manifest["spec"]["versions"][0]
        assert version["additionalPrinterColumns"] == expected["additionalPrinterColumns"]
        schema = version["schema"]["openAPIV3Schema"]
        assert schema.get("x-kubernetes-validations") == expected["schema"]["openAPIV3Schema"].get(
            "x-kubernetes-validations"
        )
