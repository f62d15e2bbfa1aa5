"""Write tools: off by default, always need approval, and do what they say when run."""

from __future__ import annotations

from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.operator.tools import default_registry, write_toolset
from lestrade.operator.tools.write import RESTARTED_AT

TOLERATE_KWOK = [k8s.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists")]


def _deployment(name: str) -> k8s.V1Deployment:
    labels = {"app": name}
    return k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1DeploymentSpec(
            replicas=1,
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels),
                spec=k8s.V1PodSpec(
                    containers=[k8s.V1Container(name="app", image="example.com/app:1.0")], tolerations=TOLERATE_KWOK
                ),
            ),
        ),
    )


def test_write_tools_are_off_by_default(api_client) -> None:
    registry = default_registry(api_client)
    assert registry.get("kubectl_delete_pod") is None
    assert not write_toolset(api_client).enabled
    assert not any("delete" in s["function"]["name"] for s in registry.schemas())


async def test_write_tools_need_approval_and_act(api_client, namespace, make_pod) -> None:
    tools = {t.name: t for t in write_toolset(api_client, enabled=True).tools}
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment("web"))
    wait_until(
        "deployment has a pod",
        lambda: len(core.list_namespaced_pod(namespace, label_selector="app=web").items) == 1,
        60,
    )

    scale = {"kind": "deployment", "name": "web", "namespace": namespace, "replicas": 3}
    assert tools["kubectl_scale"].needs_approval(scale)
    out = await tools["kubectl_scale"].run(scale)
    assert out.status == "success", out.text()
    assert apps.read_namespaced_deployment("web", namespace).spec.replicas == 3

    restart = {"kind": "deployment", "name": "web", "namespace": namespace}
    assert tools["kubectl_rollout_restart"].needs_approval(restart)
    out = await tools["kubectl_rollout_restart"].run(restart)
    assert out.status == "success", out.text()
    annotations = apps.read_namespaced_deployment("web", namespace).spec.template.metadata.annotations
    assert RESTARTED_AT in annotations
    wait_until(
        "a second ReplicaSet from the restart", lambda: len(apps.list_namespaced_replica_set(namespace).items) == 2, 60
    )

    make_pod(namespace, "doomed")
    delete = {"name": "doomed", "namespace": namespace}
    assert tools["kubectl_delete_pod"].needs_approval(delete)
    out = await tools["kubectl_delete_pod"].run(delete)
    assert out.status == "success", out.text()

    def gone_or_terminating() -> bool:
        try:
            return core.read_namespaced_pod("doomed", namespace).metadata.deletion_timestamp is not None
        except k8s.ApiException as exc:
            return exc.status == 404

    wait_until("pod deleted", gone_or_terminating, 30)

    bad = await tools["kubectl_rollout_restart"].run({"kind": "cronjob", "name": "x", "namespace": namespace})
    assert bad.status == "error" and "deployment" in (bad.error or "")
