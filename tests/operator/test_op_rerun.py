"""Restarts lose no evidence: what is safe to run again runs again, what never launched runs
once, and a turn's intents are stored together. Real apiserver, real operator (a process for
kill -9), the scripted model over HTTP."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    READ_LABEL,
    count_effects,
    create_inv,
    get_inv,
    patch_status,
    phase_is,
    transcript_messages,
    wait_inv,
    wait_until,
)
from test_op_restart import assert_status_matches_transcript, operator_process, steps_requested

from lestrade.kube import Kube
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.agent.toolcalls import call_digest
from lestrade.operator.agent.turn import OUTCOME_UNKNOWN
from lestrade.runs.records import ApprovalNeededRecord
from lestrade.runs.transcript import RecordType, Transcript


def _owner(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


def test_a_read_only_call_cut_by_a_kill_runs_again_and_the_model_gets_its_result(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="read-1",
                            name="read_probe",
                            arguments={"namespace": namespace, "tag": tag, "seconds": 120},
                        )
                    ]
                ),
                Step(content="Saw: {{ tool_output('read_probe') }}"),
            ],
        )
    )
    first = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 1)
    create_inv(api_client, namespace, "reading")
    wait_until("the read to start", lambda: count_effects(api_client, namespace, READ_LABEL, tag) >= 1, timeout=90)

    # A turn of reads is stored a status interval after it starts (it runs meanwhile): the kill
    # comes once its intent is stored, while the read still runs (for 120 s).
    def stored() -> Any:
        state, _ = transcript_messages(api_client, get_inv(api_client, namespace, "reading"))
        return state if "read-1" in state.started else None

    before = wait_until("the read's intent to be stored", stored, timeout=90)
    first.kill()
    assert "read-1" not in before.launched  # a read has no launch mark

    second = operator_process(cluster, namespace, tmp_path, model_server, scenario_name, 2)
    try:
        done = wait_inv(api_client, namespace, "reading", phase_is("Succeeded", "Failed"), timeout=90)
    finally:
        second.terminate()
    assert done["status"]["phase"] == "Succeeded", second.output()[-3000:]
    assert count_effects(api_client, namespace, READ_LABEL, tag) == 2  # read again, safely
    state, _ = transcript_messages(api_client, done)
    (result,) = [m for m in state.messages if m["role"] == "tool"]
    assert result["content"] == f"read {tag}: 3 pods ready" != OUTCOME_UNKNOWN
    assert done["status"]["analysis"] == f"Saw: read {tag}: 3 pods ready"
    assert steps_requested(model_server, scenario_name) == Counter({0: 1, 1: 1})
    assert_status_matches_transcript(api_client, done)


async def test_an_approved_call_whose_intent_was_stored_but_never_launched_runs_once_after_a_restart(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    # The state a kill leaves between storing a turn's intents and the approved action's launch
    # mark: it never ran, so it must run now (once), and the model must get its real result.
    tag = scenario_name
    model_server.add_scenario(
        Scenario(name=scenario_name, steps=[Step(content="Result: {{ tool_output('apply_fix') }}")])
    )
    inv = create_inv(api_client, namespace, "approved")
    patch_status(api_client, namespace, "approved", phase="Running", startTime="2026-01-01T00:00:00Z", steps=1)
    arguments = f'{{"namespace": "{namespace}", "tag": "{tag}"}}'
    digest = call_digest("apply_fix", arguments)
    kube = Kube(api_client)
    transcript = Transcript(kube, namespace, _owner(inv))
    for message in [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "fix-1", "type": "function", "function": {"name": "apply_fix", "arguments": arguments}}
            ],
        },
    ]:
        transcript.append_message(message)
    transcript.append(
        ApprovalNeededRecord(
            t=RecordType.APPROVAL_NEEDED,
            pending=[
                {
                    "toolCallId": "fix-1",
                    "toolName": "apply_fix",
                    "description": "apply fix",
                    "params": {},
                    "digest": digest,
                }
            ],
        )
    )
    transcript.append_decision("fix-1", True, None, digest)
    transcript.append_started("fix-1", digest)
    await transcript.sync()
    await kube.aclose()

    start_operator(scenario_name, runs_default_timeout=10**9)
    done = await asyncio.to_thread(wait_inv, api_client, namespace, "approved", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    state, _ = transcript_messages(api_client, done)
    (result,) = [m for m in state.messages if m["role"] == "tool"]
    assert result["content"] == f"fix {tag} applied"
    assert done["status"]["analysis"] == f"Result: fix {tag} applied"
    assert "fix-1" in state.launched
    assert "may not have taken effect" not in done["status"]["message"]


async def test_a_turns_intents_are_stored_in_one_write_even_at_a_chunk_boundary(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
) -> None:
    inv = create_inv(api_client, namespace, "intents")
    kube = Kube(api_client)
    writes: list[str] = []
    transcript = Transcript(kube, namespace, _owner(inv), chunk_limit=4096)
    transcript.append_message({"role": "user", "content": "x" * 3000})  # most of the first chunk
    await transcript.sync()
    commit = transcript._commit

    async def counted(batch: dict[str, str]) -> None:
        writes.append(",".join(sorted(batch)))
        await commit(batch)

    transcript._commit = counted  # type: ignore[method-assign]
    for i in range(8):  # together more than the first chunk has left, less than a chunk
        transcript.append_started(f"call-{i}", "sha256:" + "0" * 64)
    await transcript.sync()
    await kube.aclose()
    assert len(writes) == 1, writes
    state, chunks = transcript_messages(api_client, inv)
    assert state.started == {f"call-{i}" for i in range(8)} and len(chunks) == 2
    assert all(key.startswith("r-") for key in chunks[1].data) and len(chunks[1].data) == 8
