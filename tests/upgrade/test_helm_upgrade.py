"""`helm upgrade` keeps running Investigations running: the chart's pod (operator as a process
under the chart's ServiceAccount, see lestrade.testing.local_release) is replaced the way the
Deployment's rolling update replaces it — the new pod started with the upgraded settings and
ready, the old one sent SIGTERM — while one Investigation awaits approval and another waits
on the model. Both finish, each model turn is answered once into the transcript, and the
approved action runs exactly once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP
from lestrade.testing.local_release import LocalRelease, image_runner

pytestmark = pytest.mark.binaries("helm")


def steps_requested(model_server: Any, scenario: str) -> Counter[int]:
    """How many times the model was asked for each step (step = assistant messages so far)."""
    return Counter(
        sum(1 for m in body["messages"] if m.get("role") == "assistant") for body in model_server.requests(scenario)
    )


def status_of(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    obj = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, "v1alpha1", namespace, "investigations", name
    )
    return obj.get("status") or {}


def test_helm_upgrade_mid_run_finishes_every_run_exactly_once(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    apps, custom = k8s.AppsV1Api(api_client), k8s.CustomObjectsApi(api_client)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        k8s.V1Deployment(
            metadata=k8s.V1ObjectMeta(name="web"),
            spec=k8s.V1DeploymentSpec(
                replicas=1,
                selector=k8s.V1LabelSelector(match_labels=labels),
                template=k8s.V1PodTemplateSpec(
                    metadata=k8s.V1ObjectMeta(labels=labels),
                    spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="web", image="web:1")]),
                ),
            ),
        ),
    )
    approving, thinking = f"{scenario_name}-a", f"{scenario_name}-t"
    model_server.add_scenario(
        Scenario(
            name=approving,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="restart-1",
                            name="kubectl_rollout_restart",
                            arguments={"kind": "deployment", "namespace": namespace, "name": "web"},
                        )
                    ]
                ),
                Step(content="Restarted web."),
            ],
        )
    )
    slow = Scenario(name=thinking, steps=[Step(content="All quiet.", latency_ms=120_000)])
    model_server.add_scenario(slow)
    values = {
        "modelList": {s: model_server.litellm_params(s) for s in (approving, thinking)},
        "tools": {"enableWriteTools": True},
        "operator": {"watchNamespaces": [namespace]},
        "api": {"enabled": False},
    }
    release = LocalRelease(cluster, "upg", namespace, tmp_path, values, runner=image_runner()).install()
    try:
        for name, model in (("restart-web", approving), ("look-around", thinking)):
            custom.create_namespaced_custom_object(
                GROUP,
                "v1alpha1",
                namespace,
                "investigations",
                {
                    "apiVersion": f"{GROUP}/v1alpha1",
                    "kind": "Investigation",
                    "metadata": {"name": name},
                    "spec": {"title": f"{name} please", "model": model},
                },
            )
        wait_until(
            "the restart to await approval",
            lambda: (
                [p["toolCallId"] for p in status_of(api_client, namespace, "restart-web").get("pendingApprovals", [])]
                == ["restart-1"]
            ),
            90,
            watch=list(release.pod.processes.values()),
        )
        wait_until("the slow model call", lambda: steps_requested(model_server, thinking)[0] == 1, 90)

        # From now on the model answers at once (the call in flight keeps its 120 s): the new
        # operator must ask again for the turn whose answer never came, and never for a turn
        # already in the transcript. Swapped before the upgrade, as the new pod takes the runs
        # over while `upgrade` returns: swapped after, its call could get the 120 s too.
        model_server.add_scenario(Scenario(name=thinking, steps=[Step(content="All quiet.")]))
        old = release.pod
        # The upgrade changes a setting, so the new pod is visibly the new chart's.
        release.upgrade({**values, "operator": {**values["operator"], "concurrency": 4}})
        assert old is not None and not any(p.alive() for p in old.processes.values())
        new_env = {e["name"]: e.get("value") for e in release.pod.container("operator")["env"]}
        assert new_env["LESTRADE_MAX_CONCURRENT_RUNS"] == "4"
        custom.patch_namespaced_custom_object(
            GROUP,
            "v1alpha1",
            namespace,
            "investigations",
            "restart-web",
            {"spec": {"decisions": {"restart-1": {"approved": True}}}},
        )
        for name in ("restart-web", "look-around"):
            wait_until(
                f"{name} to settle",
                lambda n=name: status_of(api_client, namespace, n).get("phase") in ("Succeeded", "Failed"),
                120,
                watch=list(release.pod.processes.values()),
            )
    finally:
        release.uninstall()
    restarted = status_of(api_client, namespace, "restart-web")
    assert restarted["phase"] == "Succeeded", (restarted, release.pod.logs() if release.pod else "")
    assert restarted["analysis"] == "Restarted web."
    assert [(c["id"], c["status"]) for c in restarted["toolCalls"]] == [("restart-1", "success")]
    assert steps_requested(model_server, approving) == Counter({0: 1, 1: 1})
    # One rollout restart: the template annotated once, so one new generation.
    assert apps.read_namespaced_deployment("web", namespace).metadata.generation == 2
    looked = status_of(api_client, namespace, "look-around")
    assert looked["phase"] == "Succeeded" and looked["analysis"] == "All quiet.", looked
    assert steps_requested(model_server, thinking) == Counter({0: 2})
