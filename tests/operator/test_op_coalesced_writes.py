"""Writes a run coalesces, against the real apiserver: a delayed transcript flush takes what is
appended meanwhile in the same write, progress fields are computed once per status patch (and a
milestone's values win over them), waiting for the Running milestone sends no progress, and a
run whose turns only read stores its transcript once per status interval (and status.transcript
follows each such write); runs starting together share one read of the scope policy.

Each of these writes is a whole-object update the apiserver and every watcher pay for; a burst of
runs through `make run` spent more CPU on them than on the runs (`bench/makerun_burst_bench.py`).
Requests are counted at the client's transport seam (`Kube(session_factory=...)`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes import client as k8s
from kubernetes import watch
from opkit import (
    create_inv,
    get_inv,
    phase_is,
    resource_version,
    transcript_messages,
    wait_inv,
    wait_until,
    watch_phases,
)

from lestrade.kube import Kube, resource_path
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.status.writer import StatusWriter
from lestrade.operator.tenancy.scopes import POLICY_KEY, load_policy
from lestrade.runs.transcript import TRANSCRIPT_LABEL, Transcript


def _owner(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


def _counting(api_client: k8s.ApiClient, methods: tuple[str, ...] = ("POST", "PATCH", "PUT")) -> tuple[Kube, list[str]]:
    """A Kube whose writes (or other `methods`: method and path) are recorded as they are sent."""
    writes: list[str] = []

    async def on_start(_session: Any, _ctx: Any, params: aiohttp.TraceRequestStartParams) -> None:
        if params.method in methods:
            writes.append(f"{params.method} {params.url.path}")

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    factory: Callable[..., aiohttp.ClientSession] = lambda **kw: aiohttp.ClientSession(trace_configs=[trace], **kw)  # noqa: E731
    return Kube(api_client, session_factory=factory), writes


def _status_writer(api_client: k8s.ApiClient, namespace: str, name: str) -> tuple[StatusWriter, Kube, list[str]]:
    """A new Investigation's status writer whose progress waits long (600 s): only what a test
    sends is sent."""
    inv = create_inv(api_client, namespace, name)
    kube, writes = _counting(api_client)
    path = resource_path("investigations", namespace, name)
    return StatusWriter(kube, path, inv.get("status"), interval=600.0), kube, writes


async def _stored_messages(kube: Kube, namespace: str, owner: dict[str, str]) -> list[Any]:
    return [m["content"] for m in (await Transcript(kube, namespace, owner).load()).messages]


async def _until_stored(kube: Kube, namespace: str, owner: dict[str, str], content: str) -> None:
    deadline = time.monotonic() + 60
    while content not in await _stored_messages(kube, namespace, owner):
        assert time.monotonic() < deadline, f"{content!r} was never stored"
        await asyncio.sleep(0.1)  # polling the apiserver for the condition, with a deadline


async def test_a_delayed_transcript_flush_takes_what_is_appended_meanwhile(
    api_client: k8s.ApiClient, crds: None, namespace: str
) -> None:
    inv = create_inv(api_client, namespace, "delayed-flush")
    kube, writes = _counting(api_client)
    reader = Kube(api_client)
    writer = Transcript(kube, namespace, _owner(inv))

    # A turn's read-only result waits; the next model turn and its intent ride along, and the
    # sync before its call writes everything at once, without waiting for the delay.
    writer.append_message({"role": "user", "content": "why?"})
    writer.flush_soon(600.0)
    writer.append_message({"role": "tool", "tool_call_id": "c1", "content": "pod is fine"})
    writer.flush_soon(600.0)
    writer.append_message({"role": "assistant", "content": "next"})
    writer.append_started("c2", "sha256:x", read_only=True)
    began = time.monotonic()
    await writer.sync()
    assert time.monotonic() - began < 60
    assert len(writes) == 1 and writes[0].startswith("POST "), writes
    assert await _stored_messages(reader, namespace, _owner(inv)) == ["why?", "pod is fine", "next"]

    # On its own, a delayed flush is written once its delay passed.
    writer.append_message({"role": "tool", "tool_call_id": "c2", "content": "still fine"})
    writer.flush_soon(0.2)
    await _until_stored(reader, namespace, _owner(inv), "still fine")
    assert len(writes) == 2 and writes[1].startswith("PATCH "), writes

    # A writer that stopped (`close`) writes nothing later: another run's delayed write, due
    # after the dropped one would have been, lands alone (the loop runs timers in due order).
    writer.append_message({"role": "assistant", "content": "unsent"})
    writer.flush_soon(0.05)
    writer.close()
    other_inv = create_inv(api_client, namespace, "delayed-later")
    other = Transcript(kube, namespace, _owner(other_inv))
    other.append_message({"role": "user", "content": "due later"})
    other.flush_soon(0.5)
    await _until_stored(reader, namespace, _owner(other_inv), "due later")
    assert len(writes) == 3 and writes[2].startswith("POST "), writes
    assert "unsent" not in await _stored_messages(reader, namespace, _owner(inv))
    await kube.aclose()
    await reader.aclose()


async def test_progress_is_computed_once_per_patch_and_a_milestone_wins(
    api_client: k8s.ApiClient, crds: None, namespace: str
) -> None:
    writer, kube, writes = _status_writer(api_client, namespace, "lazy-progress")
    computed: list[int] = []

    def facts(step: int) -> Callable[[], dict[str, Any]]:
        def fields() -> dict[str, Any]:
            computed.append(step)
            return {"steps": step, "toolCallCount": step}

        return fields

    for step in range(1, 6):  # five events of a run, one patch
        writer.set_lazy("facts", facts(step))
    assert computed == []
    await writer.flush()
    assert computed == [5] and len(writes) == 1
    assert writer.last_object is not None
    assert writer.last_object["status"]["steps"] == 5

    # A milestone sets its own (settled) counts after the last progress: those are stored.
    writer.set_lazy("facts", facts(6))
    writer.set(steps=9)
    await writer.flush()
    assert writer.last_object["status"]["steps"] == 9
    assert writer.last_object["status"]["toolCallCount"] == 6  # what the milestone left alone
    await writer.close()
    await kube.aclose()


async def test_waiting_for_the_running_milestone_sends_no_progress(
    api_client: k8s.ApiClient, crds: None, namespace: str
) -> None:
    writer, kube, writes = _status_writer(api_client, namespace, "settled")

    writer.send_soon(phase="Running", message="Started")
    await writer.settled()  # the milestone's write, under way or not yet started
    assert ((writer.last_object or {}).get("status") or {}).get("phase") == "Running"
    assert len(writes) == 1, writes

    # Progress made since waits for its interval: waiting for the milestone again sends nothing
    # (`flush()` would send it now).
    writer.set(message="Step 1: calling kubectl_get_by_name")
    await writer.settled()
    assert len(writes) == 1, writes
    assert ((writer.last_object or {}).get("status") or {}).get("message") == "Started"
    await writer.close()
    await kube.aclose()


def test_a_run_of_reads_stores_its_transcript_once_when_the_interval_is_long(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    # Two turns of read-only calls, then the answer, with a status interval longer than the run:
    # the reads' intents are not stored before they run (a restart would ask the model again and
    # read again), so the whole transcript goes in one write, the create at the end. (Storing
    # each turn's intents first made it three: a create and two updates.)
    def read(call_id: str) -> Step:
        return Step(
            tool_calls=[ToolCall(id=call_id, name="read_probe", arguments={"namespace": namespace, "tag": call_id})]
        )

    model_server.add_scenario(Scenario(name=scenario_name, steps=[read("r1"), read("r2"), Step(content="All read.")]))
    start_operator(scenario_name, status_interval=600.0)
    core = k8s.CoreV1Api(api_client)
    since = core.list_namespaced_config_map(namespace).metadata.resource_version
    runs_since = resource_version(api_client, namespace)
    create_inv(api_client, namespace, "reads")
    done = wait_inv(api_client, namespace, "reads", phase_is("Succeeded", "Failed"), timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    state, chunks = transcript_messages(api_client, done)
    assert set(state.started) == {"r1", "r2"} and [m["content"] for m in state.messages][-1] == "All read."

    # Every write of the transcript, in order, up to its last one (stored before Succeeded).
    last = max(int(c.metadata.resource_version) for c in chunks)
    writes = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        namespace,
        label_selector=TRANSCRIPT_LABEL,
        resource_version=since,
        timeout_seconds=60,
    ):
        writes.append(event["type"])
        if int(event["object"].metadata.resource_version) >= last:
            break
    assert writes == ["ADDED"]

    # Status too is written once: Running rides with the end, which carries its start. (Sending
    # Running at once made it two writes, each a change for every watcher.)
    _, seen = watch_phases(
        api_client,
        namespace,
        "reads",
        lambda o: o["metadata"]["resourceVersion"] == done["metadata"]["resourceVersion"],
        since=runs_since,
    )
    assert [(o.get("status") or {}).get("phase") for o in seen] == [None, "Succeeded"]
    assert done["status"]["startTime"] <= done["status"]["completionTime"]


async def test_runs_starting_together_share_one_read_of_the_scope_policy_and_never_keep_it(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_config_map(
        namespace,
        k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(name="scopes"),
            data={POLICY_KEY: "grants:\n  - groups: [sre]\n    namespaces: [a]\n"},
        ),
    )
    kube, reads = _counting(api_client, ("GET",))
    ref = f"{namespace}/scopes"
    together = await asyncio.gather(*(load_policy(kube, ref) for _ in range(20)))
    assert len(reads) == 1 and all(p == together[0] for p in together)
    assert [g.namespaces for g in together[0].grants] == [("a",)]

    # The next run reads again, and sees a change at once (nothing is remembered).
    core.patch_namespaced_config_map(
        "scopes", namespace, {"data": {POLICY_KEY: "grants:\n  - groups: [sre]\n    namespaces: [b]\n"}}
    )
    later = await load_policy(kube, ref)
    assert len(reads) == 2 and [g.namespaces for g in later.grants] == [("b",)]
    await kube.aclose()


def test_status_follows_a_delayed_transcript_write_while_the_model_thinks(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    # A turn of reads is stored a status interval after it ran; status.transcript must follow
    # that write (`kubectl lestrade follow` reads the transcript when the run changes), not wait
    # for the end of the run: here the model then thinks for 30 s.
    call = ToolCall(id="r1", name="read_probe", arguments={"namespace": namespace, "tag": "r1"})
    model_server.add_scenario(
        Scenario(name=scenario_name, steps=[Step(tool_calls=[call]), Step(content="Done.", latency_ms=30_000)])
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "thinking")

    def followed() -> Any:
        obj = get_inv(api_client, namespace, "thinking")
        state, _ = transcript_messages(api_client, obj)
        stored = len(state.records)
        shown = ((obj.get("status") or {}).get("transcript") or {}).get("records")
        has_result = any(m.get("role") == "tool" for m in state.messages)
        return obj if has_result and shown == stored else None

    obj = wait_until("status.transcript to count the stored result", followed, timeout=20)
    assert obj["status"]["phase"] == "Running"  # the model is still thinking
