"""Several operator replicas as Kopf peers: one works, the other stands by and takes over
when the active one is killed (kill -9: no goodbye, its keep-alive has to expire)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from opkit import (
    PROBE_LABEL,
    OperatorProcess,
    count_effects,
    create_inv,
    phase_is,
    wait_inv,
    wait_until,
    write_model_list,
)

from lestrade.modelserver import Scenario, Step, ToolCall


def kopf_peering_crd(plural: str, kind: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "scope": scope,
            "group": "kopf.dev",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                        }
                    },
                }
            ],
        },
    }


def install_peering(api_client: k8s.ApiClient, namespace: str) -> None:
    ext = k8s.ApiextensionsV1Api(api_client)
    for crd in (
        kopf_peering_crd("clusterkopfpeerings", "ClusterKopfPeering", "Cluster"),
        kopf_peering_crd("kopfpeerings", "KopfPeering", "Namespaced"),
    ):
        try:
            ext.create_custom_resource_definition(crd)
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
    custom = k8s.CustomObjectsApi(api_client)

    def created() -> bool:
        try:
            custom.create_namespaced_custom_object(
                "kopf.dev",
                "v1",
                namespace,
                "kopfpeerings",
                {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "lestrade"}},
            )
            return True
        except k8s.ApiException as exc:
            if exc.status == 409:
                return True
            if exc.status == 404:  # the CRD is not served yet
                return False
            raise

    wait_until("the KopfPeering CRD to be served", created, timeout=30, interval=0.2)


def test_standby_replica_takes_over_after_kill(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    install_peering(api_client, namespace)
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="probe", name="slow_probe", arguments={"namespace": namespace, "tag": tag})]
                ),
                Step(content="done", latency_ms=4000),
            ],
        )
    )
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
    # A short keep-alive lifetime: the standby takes over within seconds (the chart's is 20 s).
    peering = ["--peering", "lestrade", "--peering-lifetime", "8"]
    active = OperatorProcess(cluster, namespace, models, tmp_path / "active.log", extra_args=peering).start()
    create_inv(api_client, namespace, "first")
    assert (
        wait_inv(api_client, namespace, "first", phase_is("Succeeded", "Failed"), timeout=90)["status"]["phase"]
        == "Succeeded"
    )

    # Started later, so lower priority: it stands by.
    standby = OperatorProcess(cluster, namespace, models, tmp_path / "standby.log", extra_args=peering).start()
    try:
        custom = k8s.CustomObjectsApi(api_client)

        def peers() -> int:
            obj = custom.get_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", "lestrade")
            return len(obj.get("status") or {})

        wait_until("both replicas in the peering object", lambda: peers() == 2, timeout=60, interval=0.2)
        assert "Resuming operations" not in standby.output()  # it starts paused and stays so
        create_inv(api_client, namespace, "second")
        wait_until(
            "the second run's last model call",
            lambda: (
                sum(
                    1
                    for b in model_server.requests(scenario_name)
                    if b["messages"][1]["content"].count("second")
                    and any(m.get("role") == "assistant" for m in b["messages"])
                )
                >= 1
            ),
            timeout=90,
        )
        active.kill()
        done = wait_inv(api_client, namespace, "second", phase_is("Succeeded", "Failed"), timeout=120)
        assert done["status"]["phase"] == "Succeeded", standby.output()[-3000:]
        assert "Resuming operations" in standby.output()
        # The probe of "second" ran once, under the first operator; the standby resumed after it.
        assert count_effects(api_client, namespace, PROBE_LABEL, tag) == 2
    finally:
        standby.terminate()
        if active.alive():
            active.terminate()
