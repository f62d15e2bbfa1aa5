"""`what_changed` on the real control plane, after a series of real changes.

The story of an incident: a Deployment reading a ConfigMap is rolled out with a new image, a
new env var, more memory and a readiness probe that points at a path that does not exist;
then someone scales it, edits the ConfigMap, adds RBAC, and a StatefulSet is rolled out too.
The tool must tell all of it, newest first, with the pod template diff, and never a value.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.operator.tools import kubernetes_toolset

TOLERATE_KWOK = [k8s.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists")]
SECRET_VALUES = ("hunter2-db-password", "tok-never-shown-7", "flag-value-9")


@pytest.fixture(scope="module")
def what_changed(api_client):
    return next(t for t in kubernetes_toolset(api_client).tools if t.name == "what_changed")


def _container(image: str, *, probe_path: str, memory: str, env: list[k8s.V1EnvVar]) -> k8s.V1Container:
    return k8s.V1Container(
        name="app",
        image=image,
        env=env,
        resources=k8s.V1ResourceRequirements(limits={"memory": memory}, requests={"cpu": "100m"}),
        readiness_probe=k8s.V1Probe(http_get=k8s.V1HTTPGetAction(path=probe_path, port=8080), period_seconds=5),
        volume_mounts=[k8s.V1VolumeMount(name="config", mount_path="/etc/web")],
    )


def _template(labels: dict[str, str], container: k8s.V1Container) -> k8s.V1PodTemplateSpec:
    return k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels=labels),
        spec=k8s.V1PodSpec(
            containers=[container],
            tolerations=TOLERATE_KWOK,
            volumes=[k8s.V1Volume(name="config", config_map=k8s.V1ConfigMapVolumeSource(name="web-config"))],
        ),
    )


def _revisions(apps: k8s.AppsV1Api, namespace: str, app: str) -> set[str]:
    return {
        (rs.metadata.annotations or {}).get("deployment.kubernetes.io/revision")
        for rs in apps.list_namespaced_replica_set(namespace, label_selector=f"app={app}").items
    }


def _times(text: str) -> list[str]:
    return re.findall(r"^(\d\d:\d\d:\d\dZ) ", text, re.M)


async def test_a_series_of_changes_newest_first_with_the_template_diff(api_client, namespace, what_changed) -> None:
    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    rbac, net = k8s.RbacAuthorizationV1Api(api_client), k8s.NetworkingV1Api(api_client)
    core.create_namespaced_config_map(
        namespace,
        k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(name="web-config"), data={"LOG_LEVEL": "debug", "DB_PASSWORD": SECRET_VALUES[0]}
        ),
    )
    labels = {"app": "web"}
    env = [
        k8s.V1EnvVar(name="API_TOKEN", value=SECRET_VALUES[1]),
        k8s.V1EnvVar(
            name="LOG_LEVEL",
            value_from=k8s.V1EnvVarSource(
                config_map_key_ref=k8s.V1ConfigMapKeySelector(name="web-config", key="LOG_LEVEL")
            ),
        ),
    ]
    apps.create_namespaced_deployment(
        namespace,
        k8s.V1Deployment(
            metadata=k8s.V1ObjectMeta(name="web", labels=labels),
            spec=k8s.V1DeploymentSpec(
                replicas=1,
                selector=k8s.V1LabelSelector(match_labels=labels),
                template=_template(
                    labels, _container("example.com/web:1.0", probe_path="/healthz", memory="64Mi", env=env)
                ),
            ),
        ),
    )
    core.create_namespaced_service(
        namespace,
        k8s.V1Service(
            metadata=k8s.V1ObjectMeta(name="web"),
            spec=k8s.V1ServiceSpec(selector=labels, ports=[k8s.V1ServicePort(port=80)]),
        ),
    )
    core.create_namespaced_service(
        namespace,
        k8s.V1Service(
            metadata=k8s.V1ObjectMeta(name="billing"),
            spec=k8s.V1ServiceSpec(selector={"app": "billing"}, ports=[k8s.V1ServicePort(port=80)]),
        ),
    )
    wait_until("the first ReplicaSet of web", lambda: _revisions(apps, namespace, "web") == {"1"}, 60)

    # the rollout that breaks the readiness probe (and changes image, env, memory)
    broken = _container(
        "example.com/web:1.1",
        probe_path="/nope",
        memory="128Mi",
        env=env + [k8s.V1EnvVar(name="NEW_FLAG", value=SECRET_VALUES[2])],
    )
    apps.patch_namespaced_deployment(
        "web", namespace, {"spec": {"template": api_client.sanitize_for_serialization(_template(labels, broken))}}
    )
    wait_until("the second ReplicaSet of web", lambda: "2" in _revisions(apps, namespace, "web"), 60)

    def rolled_out() -> bool:
        status = apps.read_namespaced_deployment_status("web", namespace).status
        return status.updated_replicas == 1 and status.replicas == 1 and status.observed_generation == 2

    wait_until("the rollout of web to finish", rolled_out, 60)  # so the scaling below is its own step

    apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 3}}, field_manager="sre-alice")
    # managed fields keep seconds: the edit must fall in a later second than the creation to be
    # told apart from it (the condition is the clock passing the creation's second, not a delay)
    created = core.read_namespaced_config_map("web-config", namespace).metadata.creation_timestamp
    wait_until(
        "a second after the ConfigMap's creation", lambda: datetime.now(UTC) >= created + timedelta(seconds=1), 5
    )
    core.patch_namespaced_config_map(
        "web-config", namespace, {"data": {"LOG_LEVEL": "trace", "FEATURE_X": "on"}}, field_manager="kubectl-edit"
    )
    rbac.create_namespaced_role(
        namespace,
        k8s.V1Role(
            metadata=k8s.V1ObjectMeta(name="reader"),
            rules=[k8s.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get"])],
        ),
        field_manager="helm",
    )
    net.create_namespaced_network_policy(
        namespace,
        k8s.V1NetworkPolicy(
            metadata=k8s.V1ObjectMeta(name="deny-all"), spec=k8s.V1NetworkPolicySpec(pod_selector=k8s.V1LabelSelector())
        ),
    )

    sts_labels = {"app": "db"}
    apps.create_namespaced_stateful_set(
        namespace,
        k8s.V1StatefulSet(
            metadata=k8s.V1ObjectMeta(name="db"),
            spec=k8s.V1StatefulSetSpec(
                service_name="db",
                replicas=1,
                selector=k8s.V1LabelSelector(match_labels=sts_labels),
                template=k8s.V1PodTemplateSpec(
                    metadata=k8s.V1ObjectMeta(labels=sts_labels),
                    spec=k8s.V1PodSpec(
                        containers=[k8s.V1Container(name="db", image="example.com/db:15")], tolerations=TOLERATE_KWOK
                    ),
                ),
            ),
        ),
    )
    wait_until(
        "the first revision of db", lambda: len(apps.list_namespaced_controller_revision(namespace).items) == 1, 60
    )
    apps.patch_namespaced_stateful_set(
        "db",
        namespace,
        {"spec": {"template": {"spec": {"containers": [{"name": "db", "image": "example.com/db:16"}]}}}},
    )
    wait_until(
        "the second revision of db", lambda: len(apps.list_namespaced_controller_revision(namespace).items) == 2, 60
    )

    out = await what_changed.run({"namespace": namespace, "minutes": 30})
    assert out.status == "success", out.text()
    text = out.data
    assert text.startswith(f"What changed for namespace {namespace} in the last 30m"), text
    assert "rollout deployment/web revision 1 -> 2" in text, text
    assert "app: image example.com/web:1.0 -> example.com/web:1.1" in text
    assert re.search(
        r"app: readinessProbe http /healthz:8080 periodSeconds=5 .*-> http /nope:8080 periodSeconds=5", text
    )
    assert "app: env +NEW_FLAG" in text
    assert "app: resources requests cpu=100m limits memory=64Mi -> requests cpu=100m limits memory=128Mi" in text
    assert "deployment/web revision 1 created" in text and "images example.com/web:1.0" in text
    assert "deployment/web replicas set to 3 by sre-alice (Update, scale subresource)" in text
    assert re.search(r"deployment/web: Scaled up replica set web-\w+ from 1 to 3", text), text
    assert re.search(
        r"configmap/web-config modified by kubectl-edit \(Update\): data keys FEATURE_X, LOG_LEVEL", text
    ), text
    assert "configmap/web-config created by OpenAPI-Generator\n" in text  # the creator, not the later editor
    assert "kube-root-ca.crt" not in text  # every namespace has it: no one's change
    assert "role/reader created by helm" in text and "networkpolicy/deny-all created" in text
    assert "service/web created" in text and "service/billing created" in text
    assert (
        "rollout statefulset/db revision 1 -> 2" in text and "db: image example.com/db:15 -> example.com/db:16" in text
    )
    for value in SECRET_VALUES + ("debug", "trace"):
        assert value not in text, value
    times = _times(text)
    assert len(times) >= 10 and times == sorted(times, reverse=True), text  # newest first

    # for one workload: what bears on it, not the billing Service or the StatefulSet
    focused = (await what_changed.run({"namespace": namespace, "workload": "deploy/web"})).data
    assert f"What changed for deployment/web in namespace {namespace}" in focused
    for wanted in (
        "rollout deployment/web",
        "service/web created",
        "configmap/web-config modified",
        "networkpolicy/deny-all created",
        "replicas set to 3",
    ):
        assert wanted in focused, (wanted, focused)
    for unwanted in ("service/billing", "statefulset/db"):
        assert unwanted not in focused, (unwanted, focused)


async def test_the_answer_stays_within_its_budget_newest_first(api_client, namespace, what_changed) -> None:
    core = k8s.CoreV1Api(api_client)
    for i in range(160):
        core.create_namespaced_config_map(
            namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=f"settings-{i:03d}-" + "x" * 40), data={"k": "v"})
        )
    out = await what_changed.run({"namespace": namespace})
    assert out.status == "success", out.text()
    assert len(out.data) <= 8200, len(out.data)
    assert re.search(r"\[\.\.\. \d+ older changes not shown", out.data), out.data[-300:]
    assert "settings-159-" in out.data  # the newest one is kept (creations come in order)


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({}, "missing required parameter 'namespace'"),
        ({"namespace": "x", "workload": "pod/web"}, "workload must be"),
        ({"namespace": "x", "minutes": "soon"}, "must be an integer"),
    ],
)
async def test_bad_arguments_are_explained(what_changed, params, error) -> None:
    out = await what_changed.run(params)
    assert out.status == "error" and error in (out.error or ""), out.text()


async def test_an_unknown_workload_is_named(what_changed, namespace) -> None:
    out = await what_changed.run({"namespace": namespace, "workload": "deployment/ghost"})
    assert out.status == "error" and "deployment ghost not found" in (out.error or ""), out.text()


async def test_an_identity_that_reads_nothing_gets_the_reason_not_an_empty_answer(cluster, namespace, tmp_path) -> None:
    from lestrade.kube import make_api_client

    with make_api_client(str(cluster.kubeconfig_for(namespace, "nobody", tmp_path / "kubeconfig"))) as client:
        tool = next(t for t in kubernetes_toolset(client).tools if t.name == "what_changed")
        out = await tool.run({"namespace": namespace})
    assert out.status == "error" and "forbidden" in (out.error or "").lower(), out.text()
    assert "no changes found" not in out.text()
