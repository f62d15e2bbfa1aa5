"""Chaos: many Investigations with approvals while the operator is killed (-9) again and again.

Every run must finish, no action may run twice, and every settled status must say exactly what
its transcript says (status is a projection of the transcript, not of the last status a dying
process managed to write). Kill points are chosen by a seeded random generator among moments
defined by progress (N more side effects seen), never by sleeping.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    GROUP,
    PLURAL,
    PROBE_LABEL,
    VERSION,
    create_inv,
    patch_decisions,
    wait_until,
)
from test_op_restart import assert_status_matches_transcript, operator_process

from lestrade.modelserver import Scenario, Step, ToolCall

RUNS = 8


def _effects(api_client: k8s.ApiClient, namespace: str) -> list[Any]:
    core = k8s.CoreV1Api(api_client)
    return [
        cm for label in (EFFECT_LABEL, PROBE_LABEL)
        for cm in core.list_namespaced_config_map(namespace, label_selector=label).items
    ]


def _all(api_client: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"]


def _approve_pending(api_client: k8s.ApiClient, namespace: str) -> None:
    for obj in _all(api_client, namespace):
        status = obj.get("status") or {}
        decided = (obj["spec"].get("decisions") or {})
        new = {p["toolCallId"]: {"approved": True} for p in status.get("pendingApprovals") or []
               if p["toolCallId"] not in decided}
        if new:
            try:
                patch_decisions(api_client, namespace, obj["metadata"]["name"], new)
            except k8s.ApiException as exc:  # already decided meanwhile (a newer status)
                if exc.status not in (409, 422):
                    raise


@pytest.mark.parametrize("seed", [7])  # one seed: each costs ~26 s of CI; six kills per seed
def test_kill_nine_again_and_again_status_always_matches_the_transcript(
    cluster: Any, api_client: k8s.ApiClient, crds: None, namespace: str, model_server: Any,
    scenario_name: str, tmp_path: Path, seed: int,
) -> None:
    rng = random.Random(seed)
    model_server.add_scenario(Scenario(name=scenario_name, vars={
        "pattern": "chaos (run[0-9]+)", "tag": "{{ match(pattern, text=first_user) }}",
    }, steps=[
        Step(tool_calls=[
            ToolCall(id="probe", name="slow_probe",
                     arguments={"namespace": namespace, "tag": "{{ tag }}", "seconds": 0.3}),
            ToolCall(id="fix", name="apply_fix",
                     arguments={"namespace": namespace, "tag": "{{ tag }}", "hold_seconds": 0.3}),
        ]),
        Step(content="Probed and fixed.", latency_ms=200),
    ]))
    n = iter(range(1, 1000))
    op = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, next(n))
    tags = [f"run{i:03d}" for i in range(RUNS)]
    for tag in tags:
        create_inv(api_client, namespace, tag, title=f"chaos {tag}")

    kills = 0
    try:
        for _ in range(6):
            target = len(_effects(api_client, namespace)) + rng.randint(1, 3)

            def progressed() -> bool:
                _approve_pending(api_client, namespace)
                settled = all((o.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                              for o in _all(api_client, namespace))
                return settled or len(_effects(api_client, namespace)) >= target

            wait_until("more side effects", progressed, timeout=120, interval=0.1)
            op.kill()
            kills += 1
            op = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, next(n))

        def all_settled() -> bool:
            _approve_pending(api_client, namespace)
            return all((o.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                       for o in _all(api_client, namespace))

        wait_until("every run settled", all_settled, timeout=240, interval=0.2)
    finally:
        op.terminate()
    assert kills >= 1
    done = _all(api_client, namespace)
    assert {o["status"]["phase"] for o in done} == {"Succeeded"}, [o["status"].get("message") for o in done]
    counts: dict[tuple[str, str], int] = {}
    for cm in _effects(api_client, namespace):
        for label in (EFFECT_LABEL, PROBE_LABEL):
            if label in (cm.metadata.labels or {}):
                key = (label, cm.metadata.labels[label])
                counts[key] = counts.get(key, 0) + 1
    assert max(counts.values()) == 1, counts  # no action ran twice
    for obj in done:
        assert_status_matches_transcript(api_client, obj)
