"""Runbooks can be added as labelled ConfigMaps and are found without a restart."""

from __future__ import annotations

from kubernetes import client as k8s

from lestrade.operator.tools import runbooks_toolset
from lestrade.operator.tools.runbooks import RUNBOOK_LABEL


async def test_configmap_runbooks_are_listed_and_fetched(api_client, namespace) -> None:
    fetch = runbooks_toolset(api_client=api_client).tools[0]
    before = await fetch.run({"name": "kafka-lag"})
    assert before.status == "error"
    k8s.CoreV1Api(api_client).create_namespaced_config_map(namespace, k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name="team-runbooks", labels={RUNBOOK_LABEL: "true"}),
        data={"kafka-lag.md": "# Consumer lag\n\nUse when: consumer lag grows.\n\n1. Check the consumer group.\n"},
    ))
    listing = await fetch.run({})
    assert "kafka-lag: Consumer lag" in listing.data and "crashloop-oom" in listing.data
    got = await fetch.run({"name": "kafka-lag"})
    assert got.status == "success"
    assert f"configmap {namespace}/team-runbooks" in got.data and "Check the consumer group" in got.data
