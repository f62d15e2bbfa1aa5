"""Finished Investigations are not watched by the operator, and what must still happen to them does.

The operator's watch asks the apiserver only for unfinished Investigations (`selection.py`), so
10,000 finished ones cost it nothing; TTL deletion has a watch of its own (`ttl.py`). These
tests check the parts that could break: the selection the operator configures, a run stopped
when its Investigation leaves the selection (someone else finished it), and TTL deletion of
Investigations that were already finished when the operator started.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import kopf
from kopf._cogs.structs.references import Resource
from kubernetes import client as k8s
from opkit import (
    GROUP,
    PLURAL,
    PROBE_LABEL,
    VERSION,
    count_effects,
    create_inv,
    get_inv,
    patch_status,
    phase_is,
    resource_version,
    wait_inv,
    wait_until,
    watch_phases,
)

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.base.metrics import RUNS_ACTIVE
from lestrade.operator.runs.selection import WARNING_EVENTS, configure_selection
from lestrade.resources.investigation import UNFINISHED_SELECTOR
from lestrade.timefmt import now_iso


def _investigations() -> Resource:
    return Resource(GROUP, VERSION, PLURAL, namespaced=True)


def test_the_operator_lists_and_watches_only_unfinished_investigations() -> None:
    """In-process, Kopf's list and watch of Investigations carry the unfinished selector (which
    the CRD's selectable fields make the apiserver honour: tests/resources); Conversations and
    Job mode (Kopf removes its finalizer from finished objects) are watched whole; lists are
    paged."""
    settings = kopf.OperatorSettings()
    configure_selection(settings, job_mode=False)
    assert list(settings.watching.field_selectors.collect(_investigations())) == [UNFINISHED_SELECTOR]
    conversations = Resource(GROUP, VERSION, "conversations", namespaced=True)
    assert list(settings.watching.field_selectors.collect(conversations)) == []
    assert settings.watching.chunk_size and settings.watching.chunk_size <= 1000
    job_mode = kopf.OperatorSettings()
    configure_selection(job_mode, job_mode=True)
    assert list(job_mode.watching.field_selectors.collect(_investigations())) == []
    # Core Events: only Warnings (the alert source), in both modes; events.k8s.io is not selected.
    for each in (settings, job_mode):
        assert list(each.watching.field_selectors.collect(Resource("", "v1", "events", namespaced=True))) == [
            WARNING_EVENTS
        ]
        assert list(each.watching.field_selectors.collect(Resource("events.k8s.io", "v1", "events"))) == []


def _finished(api_client: k8s.ApiClient, namespace: str, name: str, phase: str, **spec: Any) -> None:
    """An Investigation that some earlier operator finished."""
    create_inv(api_client, namespace, name, **spec)
    now = now_iso()
    patch_status(api_client, namespace, name, phase=phase, startTime=now, completionTime=now, message="done before")


def test_finished_before_the_start_still_deleted_after_their_ttl(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="done")]))
    _finished(api_client, namespace, "old-ok", "Succeeded", ttlSecondsAfterFinished=2)
    _finished(api_client, namespace, "old-failed", "Failed", ttlSecondsAfterFinished=2)
    _finished(api_client, namespace, "old-kept", "Succeeded")
    since = resource_version(api_client, namespace)
    start_operator(scenario_name)
    create_inv(api_client, namespace, "new", ttlSecondsAfterFinished=1)  # finishes while watched
    for name in ("old-ok", "old-failed", "new"):
        _, seen = watch_phases(api_client, namespace, name, lambda o: bool(o.get("deleted")), timeout=40, since=since)
        deleted_by = time.time()
        done = [o for o in seen if (o.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
        completed = datetime.fromisoformat(done[0]["status"]["completionTime"].replace("Z", "+00:00"))
        ttl = done[0]["spec"]["ttlSecondsAfterFinished"]
        assert deleted_by >= completed.timestamp() + ttl, name  # not before its TTL
    kept = get_inv(api_client, namespace, "old-kept")
    assert kept["status"]["phase"] == "Succeeded"
    assert kept["status"]["message"] == "done before"  # left alone: nothing ran it again


def test_a_run_stops_when_someone_else_finishes_its_investigation(
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    """Finishing leaves the operator's selection: the watch says DELETED, the run stops (as the
    API's AlertResolved does to a run that has not started), and the operator cannot write an
    unfinished phase over the final one (the CRD's rule)."""
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="p", name="slow_probe", arguments={"namespace": namespace, "tag": tag, "seconds": 300}
                        )
                    ]
                ),
                Step(content="never reached"),
            ],
        )
    )
    start_operator(scenario_name)
    create_inv(api_client, namespace, "overtaken")
    wait_until("the tool to start", lambda: count_effects(api_client, namespace, PROBE_LABEL, tag) >= 1)
    assert RUNS_ACTIVE.labels("Investigation")._value.get() == 1
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "overtaken",
        {
            "status": {
                "phase": "Failed",
                "message": "finished elsewhere",
                "completionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        },
    )
    wait_until("the run to stop", lambda: RUNS_ACTIVE.labels("Investigation")._value.get() == 0, timeout=15)
    final = wait_inv(api_client, namespace, "overtaken", phase_is("Failed"))
    assert final["status"]["message"] == "finished elsewhere"
    assert len(model_server.requests(scenario_name)) == 1  # the model was not asked again


async def test_deletion_marks_of_finished_investigations_do_not_pile_up(monkeypatch: Any) -> None:
    """Every finished Investigation leaves the watch as DELETED, mostly after its daemon ended:
    its mark must not stay forever (10,000 runs, 10,000 marks), while a daemon that was about
    to start still sees it."""
    import asyncio

    from lestrade.operator.runs import supervisor

    monkeypatch.setattr(supervisor, "GONE_MEMORY", 0.05)
    feeds = supervisor.Feeds()
    starting = feeds.gone("starting")  # a daemon about to run took its event already
    feeds.deleted("starting")
    feeds.deleted("ended")  # its daemon is long gone
    assert starting.is_set() and feeds.gone("ended").is_set()
    async with asyncio.timeout(10):
        while feeds.gone("ended").is_set():  # polls the condition; no fixed wait
            await asyncio.sleep(0.01)
    assert starting.is_set()


async def test_with_a_crd_that_cannot_select_by_phase_the_operator_watches_whole_objects(
    api_client: k8s.ApiClient,
    crds: None,
) -> None:
    """An operator started before its CRDs were applied (an upgrade done out of order) would have
    its selective watch refused ("field label not supported"): it reads the CRD first and falls
    back to the full watch instead. Conversations' CRD has no selectable fields: it stands in
    for an old Investigation CRD here (the session's CRDs are shared by every test)."""
    from lestrade.kube import Kube
    from lestrade.operator.runs.selection import crd_selects_phase

    kube = Kube(api_client)
    try:
        assert await crd_selects_phase(kube) is True
        assert await crd_selects_phase(kube, "conversations.lestrade.dev") is False
        assert await crd_selects_phase(kube, "nosuchthings.lestrade.dev") is False
    finally:
        await kube.aclose()
    settings = kopf.OperatorSettings()
    configure_selection(settings, job_mode=False, selectable=False)
    assert list(settings.watching.field_selectors.collect(_investigations())) == []


async def test_the_ttl_reaper_without_selectors_still_deletes_only_expired_ones(
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
) -> None:
    """The fallback for an older CRD: the reaper watches every Investigation and arms timers
    only for finished ones with a TTL."""
    import asyncio

    from lestrade.kube import Kube
    from lestrade.operator.runs.ttl import TtlReaper

    _finished(api_client, namespace, "expiring", "Succeeded", ttlSecondsAfterFinished=1)
    _finished(api_client, namespace, "kept", "Failed")
    create_inv(api_client, namespace, "unfinished", ttlSecondsAfterFinished=1)
    kube = Kube(api_client)
    reaper = TtlReaper(kube)
    task = asyncio.create_task(reaper.follow([namespace], selective=False))
    custom = k8s.CustomObjectsApi(api_client)

    def names() -> set[str]:
        return {
            i["metadata"]["name"]
            for i in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        }

    try:
        async with asyncio.timeout(30):
            while "expiring" in await asyncio.to_thread(names):  # polls the condition
                await asyncio.sleep(0.2)
        assert await asyncio.to_thread(names) == {"kept", "unfinished"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        reaper.close()
        await kube.aclose()


def test_the_lean_essence_is_kopfs_own() -> None:
    """Kopf builds an object's essence on every watch event; ours skips deep-copying the status
    and managedFields it drops. Same result as Kopf's for a run with all of them, for a
    ReplicaSet of a Deployment (its key depends on ownerReferences), and with extra fields."""
    from lestrade.operator.handlers import ANNOTATION_PREFIX, LeanDiffBaseStorage

    run = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Investigation",
        "metadata": {
            "name": "r",
            "namespace": "n",
            "uid": "u-1",
            "resourceVersion": "7",
            "labels": {"team": "a"},
            "annotations": {
                "note": "kept",
                "kubectl.kubernetes.io/last-applied-configuration": '{"spec": {}}',
                f"{ANNOTATION_PREFIX}/last-handled-configuration": '{"spec": {"title": "old"}}',
            },
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "ownerReferences": [{"kind": "Deployment", "name": "d", "uid": "d-1", "apiVersion": "apps/v1"}],
        },
        "spec": {"title": "t", "subject": {"kind": "Pod", "name": "p"}},
        "status": {"phase": "Running", "toolCalls": [{"id": "c1"}]},
    }
    replicaset = {**run, "apiVersion": "apps/v1", "kind": "ReplicaSet"}
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    ours = LeanDiffBaseStorage(prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    for body in (run, replicaset, {"kind": "Thing", "spec": {"a": 1}}):
        for extra in (set(), {("status", "phase")}):
            assert ours.build(body=kopf.Body(body), extra_fields=extra) == kopfs.build(
                body=kopf.Body(body), extra_fields=extra
            )
    essence = ours.build(body=kopf.Body(run), extra_fields=set())
    assert essence == {"metadata": {"labels": {"team": "a"}, "annotations": {"note": "kept"}}, "spec": run["spec"]}
