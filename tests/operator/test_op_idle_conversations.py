"""Idle Conversations leave the operator's watch (a label it sets, which Kopf's watch selects
out) and come back when a turn is appended (a metadata-only watch removes the stale label).
Real apiserver and operator: with the selector in place, a new turn is only ever answered if
the label came off."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from convkit import CONV_PLURAL, all_answered, ask, create_conv, get_conv, wait_conv
from kubernetes import client as k8s
from opkit import VERSION, wait_until

from lestrade.modelserver import Scenario, Step
from lestrade.operator.runs.idle import IDLE_LABEL, IDLE_SELECTOR
from lestrade.operator.runs.selection import configure_selection
from lestrade.resources.constants import CONVERSATION_PLURAL, GROUP


def _idle_label(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(IDLE_LABEL)


def _selected(api_client: k8s.ApiClient, namespace: str) -> set[str]:
    """What a watch with the operator's selector receives."""
    found = k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        GROUP, VERSION, namespace, CONV_PLURAL, label_selector=IDLE_SELECTOR
    )
    return {o["metadata"]["name"] for o in found["items"]}


def test_kopf_watches_only_conversations_that_are_not_idle() -> None:
    settings = kopf.OperatorSettings()
    configure_selection(settings, job_mode=False)
    assert IDLE_SELECTOR in settings.watching.label_selectors[GROUP, CONVERSATION_PLURAL]
    job = kopf.OperatorSettings()
    configure_selection(job, job_mode=True)
    assert not list(job.watching.label_selectors.collect((GROUP, CONVERSATION_PLURAL)))


async def test_an_answered_conversation_leaves_the_watch_and_a_new_turn_brings_it_back(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="first answer"),
                Step(content="second answer"),
            ],
        )
    )
    start_operator(scenario_name)
    create_conv(api_client, namespace, "chat", "first?")
    await asyncio.to_thread(wait_conv, api_client, namespace, "chat", all_answered(1))

    def idle_at_generation() -> bool:
        obj = get_conv(api_client, namespace, "chat")
        return _idle_label(obj) == str(obj["metadata"]["generation"])

    await asyncio.to_thread(wait_until, "the idle label", idle_at_generation, 60)
    assert "chat" not in _selected(api_client, namespace)

    ask(api_client, namespace, "chat", "second?")  # a new generation: the label is stale now
    done = await asyncio.to_thread(wait_conv, api_client, namespace, "chat", all_answered(2))
    assert [t.get("answer") for t in done["status"]["turns"]] == ["first answer", "second answer"]
    await asyncio.to_thread(wait_until, "idle again, at the new generation", idle_at_generation, 60)


async def test_a_conversation_answered_before_the_operator_started_is_labelled_idle(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="unused")]))
    create_conv(api_client, namespace, "old", "asked long ago")
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        CONV_PLURAL,
        "old",
        {
            "status": {
                "phase": "Answered",
                "turns": [{"ask": "asked long ago", "phase": "Answered", "answer": "long ago"}],
            }
        },
        _content_type="application/merge-patch+json",
    )
    start_operator(scenario_name)
    labelled = await asyncio.to_thread(
        wait_until, "the idle label", lambda: _idle_label(get_conv(api_client, namespace, "old")), 60
    )
    assert labelled == "1"
    assert model_server.requests(scenario_name) == []
