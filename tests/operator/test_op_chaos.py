"""Chaos: many Investigations with approvals while the operator is killed (-9) again and again,
each kill landing while tool calls run.

Every run must finish, no action may run twice, every settled status must say exactly what its
transcript says, and no evidence may be lost to a restart: a read-only call cut by a kill is run
again and the model gets its real result (never "outcome unknown"), and a call that had not
launched when the kill came runs after the restart (it never silently fails to take effect).
Kill points are chosen by a seeded random generator among moments defined by progress (N more
side effects seen, and a call in flight), never by sleeping; after each kill the frozen
transcript proves whether a call was in flight (its effect is there, its result is not).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    GROUP,
    PLURAL,
    PROBE_LABEL,
    READ_LABEL,
    VERSION,
    create_inv,
    patch_decisions,
    wait_until,
)
from test_op_restart import assert_status_matches_transcript, operator_process

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.agent.turn import OUTCOME_UNKNOWN
from lestrade.runs.transcript import CHUNK_LABEL, TRANSCRIPT_LABEL, RecordType, TranscriptState, decode_chunks

RUNS = 6
KILLS = 3
CALLS = {"read": READ_LABEL, "probe": PROBE_LABEL, "fix": EFFECT_LABEL}
"""The scenario's call ids and the label of the ConfigMap each execution leaves."""
READ_ONLY = {"read"}


@dataclass
class Snapshot:
    """Effects and transcripts of the namespace, from one list of its ConfigMaps."""

    effects: Counter[tuple[str, str]]
    """(call id, tag) -> executions."""
    transcripts: dict[str, TranscriptState]
    """tag -> decoded transcript."""

    def total(self) -> int:
        return sum(self.effects.values())

    def in_flight(self) -> list[tuple[str, str]]:
        """(call id, tag) of calls that took effect but whose result is not stored."""
        live = []
        for (call, tag), n in self.effects.items():
            state = self.transcripts.get(tag)
            results = {r["id"] for r in state.records if r.get("t") == RecordType.TOOL_RESULT} if state else set()
            if n and call not in results:
                live.append((call, tag))
        return live


def _all(api_client: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]


def _snapshot(api_client: k8s.ApiClient, namespace: str, objs: list[dict[str, Any]] | None = None) -> Snapshot:
    objs = _all(api_client, namespace) if objs is None else objs
    tags = {o["metadata"]["uid"]: o["metadata"]["name"] for o in objs}
    effects: Counter[tuple[str, str]] = Counter()
    chunks: dict[str, list[Any]] = {}
    for cm in k8s.CoreV1Api(api_client).list_namespaced_config_map(namespace).items:
        labels = cm.metadata.labels or {}
        for call, label in CALLS.items():
            if label in labels:
                effects[(call, labels[label])] += 1
        if labels.get(TRANSCRIPT_LABEL) in tags:
            chunks.setdefault(tags[labels[TRANSCRIPT_LABEL]], []).append(cm)
    transcripts = {
        tag: decode_chunks([cm.data or {} for cm in sorted(cms, key=lambda c: int(c.metadata.labels[CHUNK_LABEL]))])
        for tag, cms in chunks.items()
    }
    return Snapshot(effects, transcripts)


def _approve_pending(api_client: k8s.ApiClient, namespace: str, objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        status = obj.get("status") or {}
        decided = obj["spec"].get("decisions") or {}
        new = {
            p["toolCallId"]: {"approved": True}
            for p in status.get("pendingApprovals") or []
            if p["toolCallId"] not in decided
        }
        if new:
            try:
                patch_decisions(api_client, namespace, obj["metadata"]["name"], new)
            except k8s.ApiException as exc:  # already decided meanwhile (a newer status)
                if exc.status not in (409, 422):
                    raise


def _settled(objs: list[dict[str, Any]]) -> bool:
    return all((o.get("status") or {}).get("phase") in ("Succeeded", "Failed") for o in objs)


@pytest.mark.timeout(600)  # four operator processes start, each importing litellm, on 2 shared cores
@pytest.mark.parametrize("seed", [7])
def test_kill_nine_again_and_again_loses_no_evidence(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
    seed: int,
) -> None:
    rng = random.Random(seed)
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            vars={
                "pattern": "chaos (run[0-9]+)",
                "tag": "{{ match(pattern, text=first_user) }}",
            },
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="read",
                            name="read_probe",
                            arguments={"namespace": namespace, "tag": "{{ tag }}", "seconds": 1.0},
                        ),
                        ToolCall(
                            id="probe",
                            name="slow_probe",
                            arguments={"namespace": namespace, "tag": "{{ tag }}", "seconds": 0.5},
                        ),
                        ToolCall(
                            id="fix",
                            name="apply_fix",
                            arguments={"namespace": namespace, "tag": "{{ tag }}", "hold_seconds": 0.5},
                        ),
                    ]
                ),
                Step(content="Read, probed and fixed.", latency_ms=200),
            ],
        )
    )
    n = iter(range(1, 1000))
    op = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, next(n))
    tags = [f"run{i:03d}" for i in range(RUNS)]
    for tag in tags:
        create_inv(api_client, namespace, tag, title=f"chaos {tag}")

    kills, live_kills = 0, 0  # kills, and kills that provably landed while a call ran
    try:
        for _ in range(KILLS):
            target = _snapshot(api_client, namespace).total() + rng.randint(1, 3)

            def live_work() -> bool:
                objs = _all(api_client, namespace)
                _approve_pending(api_client, namespace, objs)
                if _settled(objs):
                    return True
                snap = _snapshot(api_client, namespace, objs)
                return snap.total() >= target and bool(snap.in_flight())

            wait_until("more side effects, with a call in flight", live_work, timeout=150, interval=0.05)
            if _settled(_all(api_client, namespace)):
                break  # nothing left to interrupt
            op.kill()
            kills += 1
            # The dead operator's transcripts are frozen: a call that took effect without a
            # stored result was in flight when the kill landed.
            frozen = _snapshot(api_client, namespace)
            if frozen.in_flight():
                live_kills += 1
            for tag, state in frozen.transcripts.items():  # a turn's intents: all or none stored
                assert len(state.started & {"read", "probe"}) in (0, 2), (tag, state.started)
            op = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, next(n))

        def all_settled() -> bool:
            objs = _all(api_client, namespace)
            _approve_pending(api_client, namespace, objs)
            return _settled(objs)

        wait_until("every run settled", all_settled, timeout=240, interval=0.2)
    finally:
        op.terminate()
    # The kills hit live work: after the kill, a call's effect was there and its result was not.
    assert live_kills >= 1, (kills, live_kills)

    done = _all(api_client, namespace)
    assert {o["status"]["phase"] for o in done} == {"Succeeded"}, [o["status"].get("message") for o in done]
    final = _snapshot(api_client, namespace)
    unknown_but_ran: Counter[str] = Counter()
    never_took_effect: Counter[str] = Counter()
    never_launched_no_effect: Counter[str] = Counter()
    for tag in tags:
        state = final.transcripts[tag]
        outputs = {m["tool_call_id"]: m["content"] for m in state.messages if m["role"] == "tool"}
        for call in CALLS:
            ran = final.effects[(call, tag)]
            if outputs[call] == OUTCOME_UNKNOWN and ran:
                unknown_but_ran[call] += 1
            if not ran:
                never_took_effect[call] += 1
                if call not in state.launched:
                    never_launched_no_effect[call] += 1
            if call not in READ_ONLY:
                assert ran <= 1, (call, tag, ran)  # no action ran twice
    print(
        f"kills {kills} (in flight: {live_kills}); ran once but reported unknown {dict(unknown_but_ran)}; "
        f"never took effect {dict(never_took_effect)}"
    )
    # Read-only calls: always their real result, and always run.
    assert all(unknown_but_ran[c] == 0 and never_took_effect[c] == 0 for c in READ_ONLY)
    # A call that never launched always took effect after the restart.
    assert sum(never_launched_no_effect.values()) == 0
    for tag in tags:  # the model got every read's real result
        outputs = {m["tool_call_id"]: m["content"] for m in final.transcripts[tag].messages if m["role"] == "tool"}
        assert outputs["read"] == f"read {tag}: 3 pods ready"
    for obj in done:
        assert_status_matches_transcript(api_client, obj)
