"""API discovery is shared by the tools of every run on one client (issue #11), without hiding
kinds that appeared before a run started."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.operator.tools.kubernetes.api import KubeApi


class CountingKubeApi(KubeApi):
    """Counts full discoveries (class-wide: the cache they fill is shared)."""

    discoveries = 0

    async def _discover(self) -> None:
        type(self).discoveries += 1
        await super()._discover()


def _crd(group: str, plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


async def test_runs_on_one_client_discover_once_and_still_see_new_kinds(api_client: k8s.ApiClient) -> None:
    client = k8s.ApiClient(api_client.configuration)  # a client of this test's own: a fresh cache
    try:
        first = CountingKubeApi(client)
        assert (await first.resolve("po")).plural == "pods"
        assert CountingKubeApi.discoveries == 1
        # A second run's tools on the same client: no discovery of their own.
        second = CountingKubeApi(client)
        assert (await second.resolve("deploy")).plural == "deployments"
        assert CountingKubeApi.discoveries == 1

        # A kind created after the cache was filled is found by a run that starts after it,
        # at once (a forced refresh), even within the refresh rate limit.
        suffix = uuid.uuid4().hex[:8]
        group, plural = f"bench{suffix}.example.com", f"widgets{suffix}"
        ext = k8s.ApiextensionsV1Api(api_client)
        ext.create_custom_resource_definition(_crd(group, plural, f"Widget{suffix}"))
        try:

            def established() -> bool:
                crd = ext.read_custom_resource_definition(f"{plural}.{group}")
                return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

            wait_until("the CRD to be established", established, 60)
            third = CountingKubeApi(client)
            assert (await third.resolve(plural)).group == group
            assert CountingKubeApi.discoveries == 2
        finally:
            ext.delete_custom_resource_definition(f"{plural}.{group}")
    finally:
        client.close()
