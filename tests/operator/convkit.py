"""Helpers for the Conversation tests: create, ask again as kubectl does, wait, read back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from opkit import GROUP, VERSION, watch_phases

from lestrade.runs.transcript import CHUNK_LABEL, TRANSCRIPT_LABEL, TranscriptState, decode_chunks

__all__ = [
    "CONV_PLURAL",
    "create_conv",
    "get_conv",
    "ask",
    "wait_conv",
    "turn_phases",
    "all_answered",
    "conv_transcript",
    "patch_conv_decisions",
]

CONV_PLURAL = "conversations"


def create_conv(api_client: k8s.ApiClient, namespace: str, name: str, *asks: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Conversation",
        "metadata": {"name": name},
        "spec": {"turns": [{"ask": a} for a in asks], **spec},
    }
    return k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, CONV_PLURAL, body
    )


def get_conv(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(GROUP, VERSION, namespace, CONV_PLURAL, name)


def ask(api_client: k8s.ApiClient, namespace: str, name: str, text: str) -> dict[str, Any]:
    """What `kubectl patch conv NAME --type json -p '[{"op":"add","path":"/spec/turns/-",...}]'`
    sends."""
    return k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        CONV_PLURAL,
        name,
        [{"op": "add", "path": "/spec/turns/-", "value": {"ask": text}}],
        _content_type="application/json-patch+json",
    )


def patch_conv_decisions(
    api_client: k8s.ApiClient, namespace: str, name: str, decisions: dict[str, Any]
) -> dict[str, Any]:
    return k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        CONV_PLURAL,
        name,
        {"spec": {"decisions": decisions}},
        _content_type="application/merge-patch+json",
    )


def wait_conv(
    api_client: k8s.ApiClient,
    namespace: str,
    name: str,
    until: Callable[[dict[str, Any]], bool],
    timeout: float = 90,
) -> dict[str, Any]:
    return watch_phases(api_client, namespace, name, until, timeout, plural=CONV_PLURAL)[0]


def turn_phases(obj: dict[str, Any]) -> list[str]:
    return [t.get("phase") for t in (obj.get("status") or {}).get("turns") or []]


def all_answered(turns: int) -> Callable[[dict[str, Any]], bool]:
    """Every one of `turns` turns is settled (Answered or Failed)."""

    def check(obj: dict[str, Any]) -> bool:
        phases = turn_phases(obj)
        return len(phases) >= turns and all(p in ("Answered", "Failed") for p in phases[:turns])

    return check


def conv_transcript(api_client: k8s.ApiClient, obj: dict[str, Any]) -> TranscriptState:
    found = k8s.CoreV1Api(api_client).list_namespaced_config_map(
        obj["metadata"]["namespace"], label_selector=f"{TRANSCRIPT_LABEL}={obj['metadata']['uid']}"
    )
    items = sorted(found.items, key=lambda cm: int(cm.metadata.labels[CHUNK_LABEL]))
    return decode_chunks([cm.data or {} for cm in items])
