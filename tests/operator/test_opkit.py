"""The operator tests' own watch helper: it must not miss what happened before it was called
(a missed deletion made the delete-while-running test flaky on a loaded machine)."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from opkit import GROUP, PLURAL, VERSION, create_inv, resource_version, watch_phases


def _delete(api_client: k8s.ApiClient, namespace: str, name: str) -> None:
    # No operator runs here, so there is no finalizer: the object is gone when this returns.
    k8s.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def test_a_deletion_before_the_watch_is_reported(api_client: k8s.ApiClient, crds: None, namespace: str) -> None:
    create_inv(api_client, namespace, "gone")
    _delete(api_client, namespace, "gone")
    final, seen = watch_phases(api_client, namespace, "gone", lambda o: bool(o.get("deleted")), timeout=5)
    assert final["deleted"] and final["metadata"]["name"] == "gone"
    assert seen == [final]


def test_since_replays_every_change_after_it(api_client: k8s.ApiClient, crds: None, namespace: str) -> None:
    since = resource_version(api_client, namespace)
    created: dict[str, Any] = create_inv(api_client, namespace, "brief")
    _delete(api_client, namespace, "brief")
    final, seen = watch_phases(api_client, namespace, "brief", lambda o: bool(o.get("deleted")), timeout=5, since=since)
    assert [(o["metadata"]["uid"], bool(o.get("deleted"))) for o in seen] == [
        (created["metadata"]["uid"], False),
        (created["metadata"]["uid"], True),
    ]
