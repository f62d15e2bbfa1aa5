"""Fenced transcript and status writes: of two writers of one run's transcript (a replica that
lost the run and the one that took it over, or a stale owner and the context store), whoever
writes second with an outdated view is refused and stops; what the other stored stays intact.
Status likewise: once another attempt claimed it, a stale attempt's write is refused. Real
apiserver, the product's `Transcript` and `StatusWriter` (what every replica's runs write with)
and the real operator."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import create_inv, phase_is, transcript_messages, wait_inv, wait_until
from test_op_restart import assert_status_matches_transcript, steps_requested

from lestrade.kube import Kube, resource_path
from lestrade.modelserver import Scenario, Step
from lestrade.operator.admission.decisions import install_admission_policy
from lestrade.operator.status.writer import StatusFenced, StatusWriter
from lestrade.runs.records import AgentRecord
from lestrade.runs.transcript import SEAL_KEY, RecordType, Transcript, TranscriptFenced


def _owner(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


async def test_a_stale_replicas_late_write_is_refused_and_the_new_owners_records_stay(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
) -> None:
    inv = create_inv(api_client, namespace, "two-owners")
    kube = Kube(api_client)
    first = Transcript(kube, namespace, _owner(inv))
    first.append_message({"role": "user", "content": "why is web down?"})
    await first.sync()

    # Replica B takes the run over (it reads the transcript and goes on) while replica A,
    # fenced but not yet aware of it, still holds its old view.
    stale, owner = Transcript(kube, namespace, _owner(inv)), Transcript(kube, namespace, _owner(inv))
    await stale.load()
    await owner.load()
    owner.append_message({"role": "assistant", "content": "by the new owner"})
    await owner.sync()
    stale.append_message({"role": "assistant", "content": "late, by the fenced replica"})
    with pytest.raises(TranscriptFenced):
        await stale.sync()

    state = await Transcript(kube, namespace, _owner(inv)).load()
    assert [m["content"] for m in state.messages] == ["why is web down?", "by the new owner"]
    # The owner keeps writing: its own view is current.
    owner.append_message({"role": "user", "content": "and now?"})
    await owner.sync()
    assert len((await Transcript(kube, namespace, _owner(inv)).load()).messages) == 3
    await kube.aclose()


async def test_a_stale_write_is_refused_after_the_owner_moved_to_a_new_chunk(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
) -> None:
    inv = create_inv(api_client, namespace, "rolled")
    kube = Kube(api_client)
    first = Transcript(kube, namespace, _owner(inv), chunk_limit=4096)
    first.append_message({"role": "user", "content": "x" * 2000})
    await first.sync()
    stale = Transcript(kube, namespace, _owner(inv), chunk_limit=4096)
    owner = Transcript(kube, namespace, _owner(inv), chunk_limit=4096)
    await stale.load()
    await owner.load()
    owner.append_message({"role": "tool", "tool_call_id": "a", "content": "y" * 3000})  # needs a new chunk
    await owner.sync()
    assert len(owner.chunks) == 2
    stale.append_message({"role": "assistant", "content": "small enough for the old chunk"})
    with pytest.raises(TranscriptFenced):
        await stale.sync()
    _, chunks = transcript_messages(api_client, inv)
    assert SEAL_KEY in chunks[0].data and len(chunks) == 2
    state = await Transcript(kube, namespace, _owner(inv)).load()
    assert [m["role"] for m in state.messages] == ["user", "tool"]
    await kube.aclose()


async def test_a_run_whose_transcript_someone_else_extended_stops_and_resumes_from_it(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    steps = [Step(content="stale answer", latency_ms=15_000)]
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    start_operator(scenario_name)
    inv = create_inv(api_client, namespace, "interleaved")
    await asyncio.to_thread(
        wait_until, "the model call", lambda: steps_requested(model_server, scenario_name)[0] >= 1, 90
    )
    # While the operator waits for the model, another writer (a replica that took the run
    # over) stores a record: the operator's next write must be refused, not interleaved.
    kube = Kube(api_client)
    other = Transcript(kube, namespace, _owner(inv))
    await other.load()
    other.append(AgentRecord(t=RecordType.AGENT, event="note", text="written by the other owner"))
    await other.sync()
    await kube.aclose()
    steps[0] = Step(content="fresh answer")
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    done = await asyncio.to_thread(wait_inv, api_client, namespace, "interleaved", phase_is("Succeeded", "Failed"), 120)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    state, _ = transcript_messages(api_client, done)
    kinds = [r["t"] for r in state.records]
    assert kinds.count(RecordType.AGENT) == 1  # the other writer's record is kept, in its place
    assert [m["content"] for m in state.messages if m["role"] == "assistant"] == ["fresh answer"]
    # The refused attempt's answer was never stored; the resumed attempt asked once more.
    assert steps_requested(model_server, scenario_name) == Counter({0: 2})
    assert_status_matches_transcript(api_client, done)


async def test_a_stale_attempts_late_status_write_is_refused_after_a_takeover(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
) -> None:
    inv = create_inv(api_client, namespace, "status-owners")
    kube = Kube(api_client)
    path = resource_path("investigations", namespace, "status-owners")
    stale = StatusWriter(kube, path, token="replica-a/1")
    await stale.milestone(message="working, as replica a")
    # Replica b takes the run over: its first write claims status (unconditionally).
    owner = StatusWriter(kube, path, token="replica-b/1")
    await owner.milestone(message="working, as replica b")
    # Replica a, fenced but not yet aware of it, still sends what it had: refused.
    with pytest.raises(StatusFenced):
        await stale.milestone(message="late, by the fenced replica", steps=7)
    status = (await kube.get(path))["status"]
    assert status["message"] == "working, as replica b" and status["writer"] == "replica-b/1"
    assert status.get("steps", 0) == 0
    # A refused write is not stored later either (the background flush neither).
    stale.set(message="still late")
    with pytest.raises(StatusFenced):
        await stale.flush()
    # The owner keeps writing: its view is current.
    await owner.milestone(message="done, as replica b")
    assert (await kube.get(path))["status"]["message"] == "done, as replica b"
    await kube.aclose()
    assert inv["metadata"]["name"] == "status-owners"


async def test_other_writes_between_a_writers_patches_do_not_fence_it(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
) -> None:
    """A person's decision, a label and the delivery record move the object's resourceVersion:
    the writer's conditional patch conflicts, finds its own token still there and goes on."""
    kube = Kube(api_client)
    await install_admission_policy(kube)  # as every operator does; the suite's order must not matter
    create_inv(api_client, namespace, "busy-object")
    path = resource_path("investigations", namespace, "busy-object")
    writer = StatusWriter(kube, path, token="replica-a/1")
    await writer.milestone(message="first")
    before = writer.last_object["metadata"]["resourceVersion"]  # type: ignore[index]
    await kube.patch(path, {"metadata": {"labels": {"touched": "yes"}}})
    # the decisions policy accepts a decision only for a listed call: list it, as the run would
    pending = {"toolCallId": "call-1", "toolName": "kubectl_delete_pod", "description": "delete", "params": {}}
    await kube.patch(f"{path}/status", {"status": {"pendingApprovals": [pending]}})
    await kube.patch(path, {"spec": {"decisions": {"call-1": {"approved": True}}}})
    await kube.patch(f"{path}/status", {"status": {"delivery": "d1"}})
    await writer.milestone(message="second")
    stored = await kube.get(path)
    assert stored["status"]["message"] == "second" and stored["status"]["delivery"] == "d1"
    assert stored["status"]["writer"] == "replica-a/1"
    assert int(stored["metadata"]["resourceVersion"]) > int(before)
    await kube.aclose()
