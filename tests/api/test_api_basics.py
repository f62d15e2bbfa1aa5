"""The API process: health, readiness backed by a shared watch, and Kubernetes-token auth."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest
from apikit import serve
from kubernetes import client as k8s

from lestrade.api.app import create_app
from lestrade.kube import Kube
from lestrade.localcluster.processes import wait_until
from lestrade.resources import GROUP, VERSION


def _ready(base: str) -> bool:
    return httpx.get(f"{base}/readyz").status_code == 200


def test_readyz_waits_for_the_watch_and_healthz_is_always_up(cluster, crds) -> None:
    with cluster.api_client() as api, serve(create_app(api)) as base:
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        wait_until("ready", lambda: _ready(base), 30)
        assert httpx.get(f"{base}/readyz").json()["watching"] == ["investigations", "conversations"]


def test_readyz_reports_missing_crds(cluster) -> None:
    """Against resources that do not exist the API stays unready and says why."""
    with cluster.api_client() as api:
        app = create_app(api)
        from lestrade.api.base.watch import SharedWatch

        app.state.watches["investigations"] = SharedWatch(app.state.kube, "nosuchthings")
        with serve(app) as base:

            def reported() -> bool:
                body = httpx.get(f"{base}/readyz").json()
                return body.get("waiting", {}).get("investigations") == "ApiException: Not Found"

            wait_until("readyz to report the missing resource", reported, 30)
            assert httpx.get(f"{base}/readyz").status_code == 503


async def test_one_shared_watch_fans_out_to_many_subscribers(cluster, crds, namespace) -> None:
    from lestrade.api.base.watch import SharedWatch

    watches_opened: list[str] = []

    async def on_request_start(session: Any, context: Any, params: Any) -> None:
        if params.url.query.get("watch") == "true":
            watches_opened.append(str(params.url))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_request_start)
    with cluster.api_client() as api:
        kube = Kube(api, session_factory=functools.partial(aiohttp.ClientSession, trace_configs=[trace]))
        watch = SharedWatch(kube, "investigations")
        watch.start()
        try:
            await asyncio.wait_for(watch.synced.wait(), 30)
            await wait_for_watch(watches_opened)
            async with watch.subscribe() as q1, watch.subscribe() as q2, watch.subscribe() as q3:
                k8s.CustomObjectsApi(api).create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    "investigations",
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "Investigation",
                        "metadata": {"name": "fanout"},
                        "spec": {"title": "fan out"},
                    },
                )
                for queue in (q1, q2, q3):
                    while True:
                        event = await asyncio.wait_for(queue.get(), 30)
                        if event.object["metadata"]["name"] == "fanout":
                            assert event.type == "ADDED"
                            break
            assert watch.objects[(namespace, "fanout")]["spec"]["title"] == "fan out"
            assert len(watches_opened) == 1  # three subscribers, one watch on the apiserver
        finally:
            await watch.stop()
            await kube.aclose()


async def test_the_shared_watch_lists_in_pages_and_keeps_slim_objects(
    cluster,
    crds,
    namespace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """10,000 runs must not cost the API one huge list nor the apiserver's bookkeeping of each:
    the list is paged, and the cache drops managedFields and kubectl's last-applied copy (no
    reader uses them) but keeps everything a reader does."""
    from lestrade.api.base import watch as watch_module

    monkeypatch.setattr(watch_module, "LIST_CHUNK", 2)
    lists: list[dict[str, str]] = []

    async def on_request_start(session: Any, context: Any, params: Any) -> None:
        if params.method == "GET" and params.url.query.get("watch") != "true":
            lists.append(dict(params.url.query))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_request_start)
    custom = k8s.CustomObjectsApi
    with cluster.api_client() as api:
        for i in range(3):
            custom(api).create_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "investigations",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Investigation",
                    "metadata": {
                        "name": f"slim-{i}",
                        "labels": {"team": "a"},
                        "annotations": {
                            "kubectl.kubernetes.io/last-applied-configuration": '{"spec": {"title": "x"}}',
                            "note": "kept",
                        },
                    },
                    "spec": {"title": f"slim {i}"},
                },
            )
        custom(api).patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "investigations", "slim-0", {"status": {"phase": "Running"}}
        )
        kube = Kube(api, session_factory=functools.partial(aiohttp.ClientSession, trace_configs=[trace]))
        watch = watch_module.SharedWatch(kube, "investigations")
        watch.start()
        try:
            await asyncio.wait_for(watch.synced.wait(), 30)
            assert len(lists) >= 2 and all(q.get("limit") == "2" for q in lists), lists
            assert "continue" in lists[1]
            cached = {name: obj for (ns, name), obj in watch.objects.items() if ns == namespace}
            assert sorted(cached) == ["slim-0", "slim-1", "slim-2"]
            for obj in cached.values():
                assert "managedFields" not in obj["metadata"]
                # (the requester policy, once an operator installed it, adds its own annotations)
                annotations = obj["metadata"]["annotations"]
                assert annotations["note"] == "kept"
                assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations
                assert obj["metadata"]["labels"] == {"team": "a"} and obj["metadata"]["uid"]
            assert cached["slim-0"]["status"]["phase"] == "Running"
            # Changes arrive slim as well.
            async with watch.subscribe() as queue:
                custom(api).patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, "investigations", "slim-1", {"status": {"phase": "Running"}}
                )
                while True:
                    event = await asyncio.wait_for(queue.get(), 30)
                    if event.object["metadata"]["name"] == "slim-1":
                        break
            assert "managedFields" not in event.object["metadata"]
            assert event.object["status"]["phase"] == "Running"
        finally:
            await watch.stop()
            await kube.aclose()


async def wait_for_watch(opened: list[str], timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not opened:
            await asyncio.sleep(0.01)


@pytest.fixture
def secured(cluster, crds, namespace) -> Iterator[str]:
    with cluster.api_client() as api, serve(create_app(api, auth=True, namespace=namespace)) as base:
        yield base


def test_auth_requires_a_token(secured) -> None:
    response = httpx.get(f"{secured}/api/whoami")
    assert response.status_code == 401
    assert "Bearer" in response.json()["detail"]
    assert httpx.get(f"{secured}/healthz").status_code == 200


def test_auth_rejects_an_invalid_token(secured) -> None:
    response = httpx.get(f"{secured}/api/whoami", headers={"Authorization": "Bearer not-a-token"})
    assert response.status_code == 401
    assert "not valid" in response.json()["detail"]


def test_auth_follows_rbac(secured, cluster, api_client, namespace) -> None:
    token = cluster.token_for(namespace, "caller")
    headers = {"Authorization": f"Bearer {token}"}
    denied = httpx.get(f"{secured}/api/whoami", headers=headers)
    assert denied.status_code == 403
    assert f"system:serviceaccount:{namespace}:caller may not create investigations" in denied.json()["detail"]

    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(
        namespace,
        k8s.V1Role(
            metadata=k8s.V1ObjectMeta(name="investigator"),
            rules=[k8s.V1PolicyRule(api_groups=[GROUP], resources=["investigations"], verbs=["create", "get"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name="caller"),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="investigator"),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name="caller", namespace=namespace)],
        ),
    )
    # a second token: the first one's denial is cached for a short while
    fresh = {"Authorization": f"Bearer {cluster.token_for(namespace, 'caller')}"}
    wait_until("RBAC to allow", lambda: httpx.get(f"{secured}/api/whoami", headers=fresh).status_code == 200, 30)
    assert (
        httpx.get(f"{secured}/api/whoami", headers=fresh).json()["user"] == f"system:serviceaccount:{namespace}:caller"
    )
