"""Two operator replicas sharing the work (`--replicas shared`) on the real apiserver: a burst
is split between them and every run happens once; kill -9 of the owner moves its runs to the
other within the lease bound, with the restart guarantees (the interrupted model call is asked
once more, a started tool never again, a decision made while the owner was dead acts once);
a replica that loses its own Lease stops its run and claims it again in a new epoch."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    PROBE_LABEL,
    OperatorProcess,
    OperatorThread,
    count_effects,
    create_inv,
    get_inv,
    model_list,
    patch_decisions,
    phase_is,
    transcript_messages,
    wait_inv,
    wait_until,
    write_model_list,
)
from test_op_restart import assert_status_matches_transcript, steps_requested

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.replicas.ownership import OWNER_ANNOTATION

# Short leases so a takeover fits in a test: dead after 10 s without renewal, a replica that
# cannot renew stops its runs after 6 s, renewals (and looks at the others) every second. (A
# starved test machine can miss a 4 s renew deadline: the replica then stops its runs and
# resumes them, correctly, but a test counting model calls would see the resumption.)
LEASE_ENV = {
    "LESTRADE_LEASE_DURATION": "10",
    "LESTRADE_LEASE_RENEW_DEADLINE": "6",
    "LESTRADE_LEASE_RENEW_INTERVAL": "1",
}
TAKEOVER_BOUND = 10 + 1  # the lease duration plus one look at the Leases
# Nothing is taken over in the burst: leases that no starved moment can make expire.
LONG_LEASE_ENV = {
    "LESTRADE_LEASE_DURATION": "60",
    "LESTRADE_LEASE_RENEW_DEADLINE": "40",
    "LESTRADE_LEASE_RENEW_INTERVAL": "2",
}


def owner_of(obj: dict[str, Any]) -> str:
    """The Lease name in the object's claim (`<lease>/<uid>/<epoch>`)."""
    return ((obj["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION) or "").split("/")[0]


def requests_of(model_server: Any, scenario: str, name: str) -> int:
    """Model requests made for the Investigation `name` (its title is in the user message)."""
    return sum(1 for body in model_server.requests(scenario) if f"Investigate {name}" in body["messages"][1]["content"])


def test_a_burst_is_split_between_two_replicas_and_each_run_happens_once(
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
                        ToolCall(id="probe", name="slow_probe", arguments={"namespace": namespace, "tag": tag})
                    ],
                    latency_ms=300,
                ),
                Step(content="nothing wrong", latency_ms=300),
            ],
        )
    )
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
    # 4 runs at once per replica: 12 at once cannot all go to one of them.
    group, procs = two_replicas(
        cluster, namespace, models, tmp_path, {"LESTRADE_MAX_CONCURRENT_RUNS": "4", **LONG_LEASE_ENV}
    )
    names = [f"run-{i:02d}" for i in range(12)]  # no name is a prefix of another
    try:
        wait_both_leases(api_client, namespace, group)
        for name in names:
            create_inv(api_client, namespace, name)
        done = [wait_inv(api_client, namespace, name, phase_is("Succeeded", "Failed"), timeout=120) for name in names]
    finally:
        for proc in procs.values():
            proc.terminate()
    assert [d["status"]["phase"] for d in done] == ["Succeeded"] * len(names)
    owners = Counter(owner_of(d) for d in done)
    assert set(owners) == set(procs), owners  # both did work
    # Exactly once, whoever ran it: two model calls and one probe per run (a run started by
    # both replicas would have asked for its first step twice).
    assert {name: requests_of(model_server, scenario_name, name) for name in names} == {n: 2 for n in names}
    assert count_effects(api_client, namespace, PROBE_LABEL, tag) == len(names)
    for d in done:
        assert_status_matches_transcript(api_client, d)
    # Neither replica lost its Lease on the way (that would have moved runs, not shared them).
    assert not any("lost (" in proc.output() for proc in procs.values())


def shared_process(
    cluster: Any, namespace: str, models: Path, tmp_path: Path, name: str, group: str, env: dict[str, str] | None = None
) -> OperatorProcess:
    env = {
        "LESTRADE_REPLICAS": "shared",
        "LESTRADE_REPLICA_NAME": name,
        "LESTRADE_REPLICA_GROUP": group,
        "POD_NAMESPACE": namespace,
        "LESTRADE_CLAIM_HANDOFF": "0.2",
        **LEASE_ENV,
        **(env or {}),
    }
    return OperatorProcess(cluster, namespace, models, tmp_path / f"{name}.log", extra_args=[], env=env).start()


def two_replicas(
    cluster: Any, namespace: str, models: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[str, dict[str, OperatorProcess]]:
    """Two `python -m lestrade.operator --replicas shared` processes; keys: their Lease names."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    procs = {f"{group}-{n}": shared_process(cluster, namespace, models, tmp_path, n, group, env) for n in ("a", "b")}
    return group, procs


def leases_of(api_client: k8s.ApiClient, namespace: str, group: str) -> int:
    return len(
        k8s.CoordinationV1Api(api_client)
        .list_namespaced_lease(namespace, label_selector=f"lestrade.dev/replicas={group}")
        .items
    )


def wait_both_leases(api_client: k8s.ApiClient, namespace: str, group: str) -> None:
    wait_until("both replicas' Leases", lambda: leases_of(api_client, namespace, group) == 2, timeout=60, interval=0.1)


def test_kill_9_of_the_owner_moves_its_runs_and_a_decision_made_meanwhile_acts_once(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    # Replica a alone first, so it owns both runs: one waits for a model answer (killed mid
    # call), one waits for a decision (decided while no owner lives). Then b joins, a dies.
    tag, fixing = scenario_name, f"{scenario_name}-fix"
    steps = [
        Step(tool_calls=[ToolCall(id="probe-1", name="slow_probe", arguments={"namespace": namespace, "tag": tag})]),
        Step(content="All good.", latency_ms=60_000),
    ]
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    model_server.add_scenario(
        Scenario(
            name=fixing,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": tag})]
                ),
                Step(content="Fix applied."),
            ],
        )
    )
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name, fixing)
    group = f"g-{uuid.uuid4().hex[:6]}"
    a = shared_process(cluster, namespace, models, tmp_path, "a", group)
    procs = {f"{group}-a": a}
    try:
        wait_until("replica a's Lease", lambda: leases_of(api_client, namespace, group) == 1, timeout=60, interval=0.1)
        create_inv(api_client, namespace, "moving")
        create_inv(api_client, namespace, "approving", model=fixing)
        procs[f"{group}-b"] = b = shared_process(cluster, namespace, models, tmp_path, "b", group)
        paused = wait_inv(api_client, namespace, "approving", phase_is("AwaitingApproval", "Failed"), timeout=90)
        assert paused["status"]["phase"] == "AwaitingApproval"
        wait_until("the second model call", lambda: steps_requested(model_server, scenario_name)[1] >= 1, timeout=90)
        wait_until("replica b's Lease", lambda: leases_of(api_client, namespace, group) == 2, timeout=60, interval=0.1)
        assert {owner_of(get_inv(api_client, namespace, n)) for n in ("moving", "approving")} == {f"{group}-a"}
        steps[1] = Step(content="All good.")  # the survivor's call is answered at once
        model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
        a.kill()
        killed = time.monotonic()
        patch_decisions(api_client, namespace, "approving", {"fix-1": {"approved": True}})
        wait_until(
            "the survivor to ask the interrupted call again",
            lambda: steps_requested(model_server, scenario_name)[1] >= 2,
            timeout=60,
        )
        took = time.monotonic() - killed
        done = {
            n: wait_inv(api_client, namespace, n, phase_is("Succeeded", "Failed"), timeout=60)
            for n in ("moving", "approving")
        }
    finally:
        for proc in procs.values():
            if proc.alive():
                proc.terminate()
    assert {n: d["status"]["phase"] for n, d in done.items()} == {"moving": "Succeeded", "approving": "Succeeded"}, (
        b.output()[-3000:]
    )
    assert {owner_of(d) for d in done.values()} == {f"{group}-b"}
    # Bounded: the lease duration plus one look at the Leases, with room for a loaded machine.
    assert took < TAKEOVER_BOUND + 15, took

    moving = done["moving"]  # the interrupted model call asked once more, the probe never again
    assert steps_requested(model_server, scenario_name) == Counter({0: 1, 1: 2})
    assert count_effects(api_client, namespace, PROBE_LABEL, tag) == 1
    state, _ = transcript_messages(api_client, moving)
    assert [m["role"] for m in state.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert_status_matches_transcript(api_client, moving)

    approving = done["approving"]  # the decision made while no owner lived: acted on once
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    state, _ = transcript_messages(api_client, approving)
    (pending,) = paused["status"]["pendingApprovals"]
    assert state.decisions == {"fix-1": {"approved": True, "reason": None, "digest": pending["digest"]}}
    assert steps_requested(model_server, fixing) == Counter({0: 1, 1: 1})
    assert_status_matches_transcript(api_client, approving)


def solo_replica(namespace: str) -> tuple[str, dict[str, Any]]:
    """A lone shared replica in a group of its own: a long lease (nothing expires by itself in
    the test) renewed often (a refused renewal is noticed at once)."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    return group, {
        "replicas_mode": "shared",
        "replicas_name": "solo",
        "replicas_group": group,
        "replicas_lease_namespace": namespace,
        "replicas_lease_duration": 30.0,
        "replicas_lease_renew_deadline": 20.0,
        "replicas_lease_renew_interval": 0.5,
    }


def test_a_replica_that_loses_its_lease_stops_its_run_and_claims_it_again_in_a_new_epoch(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
) -> None:
    steps = [Step(content="late answer", latency_ms=60_000)]
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    group, settings = solo_replica(namespace)
    coord = k8s.CoordinationV1Api(api_client)
    with OperatorThread(cluster, namespace, model_list(model_server, scenario_name), **settings):
        create_inv(api_client, namespace, "fenced")
        wait_until("the model call", lambda: steps_requested(model_server, scenario_name)[0] >= 1, timeout=90)
        claimed = get_inv(api_client, namespace, "fenced")["metadata"]["annotations"][OWNER_ANNOTATION]
        assert claimed.endswith("/0")
        steps[0] = Step(content="answer")
        model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
        # Someone else writes the replica's Lease: its next renewal is refused (409), so it
        # must stop its run at once, then take the Lease again in a new epoch and re-claim.
        lease = coord.read_namespaced_lease(f"{group}-solo", namespace)
        lease.spec.holder_identity = "someone-else"
        coord.replace_namespaced_lease(f"{group}-solo", namespace, lease)
        done = wait_inv(api_client, namespace, "fenced", phase_is("Succeeded", "Failed"), timeout=90)
    assert done["status"]["phase"] == "Succeeded"
    owner = done["metadata"]["annotations"][OWNER_ANNOTATION]
    assert owner.rsplit("/", 1)[0] == claimed.rsplit("/", 1)[0] and owner.endswith("/1"), (claimed, owner)
    # The interrupted call was asked once more, by the new epoch only.
    assert steps_requested(model_server, scenario_name) == Counter({0: 2})
    assert_status_matches_transcript(api_client, done)


def test_a_rewritten_claim_stops_the_owners_run(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
) -> None:
    # Hostile or by hand: the claim is rewritten to name a replica that does not exist. The
    # owner stops its run at once; the named holder is not alive, so it claims again and
    # resumes (the interrupted call asked once more) — never two runs at a time.
    steps = [Step(content="late answer", latency_ms=60_000)]
    model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
    group, settings = solo_replica(namespace)
    with OperatorThread(cluster, namespace, model_list(model_server, scenario_name), **settings):
        create_inv(api_client, namespace, "rewritten")
        wait_until("the model call", lambda: steps_requested(model_server, scenario_name)[0] >= 1, timeout=90)
        claimed = get_inv(api_client, namespace, "rewritten")["metadata"]["annotations"][OWNER_ANNOTATION]
        steps[0] = Step(content="answer")
        model_server.add_scenario(Scenario(name=scenario_name, steps=steps))
        k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            "lestrade.dev",
            "v1alpha1",
            namespace,
            "investigations",
            "rewritten",
            {"metadata": {"annotations": {OWNER_ANNOTATION: f"{group}-ghost/no-such-uid/0"}}},
        )
        done = wait_inv(api_client, namespace, "rewritten", phase_is("Succeeded", "Failed"), timeout=90)
    assert done["status"]["phase"] == "Succeeded"
    assert done["metadata"]["annotations"][OWNER_ANNOTATION] == claimed
    assert steps_requested(model_server, scenario_name) == Counter({0: 2})
    assert_status_matches_transcript(api_client, done)
