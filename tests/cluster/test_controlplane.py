"""The local control plane is a real Kubernetes API: TLS, RBAC, watches, controllers, KWOK."""

from __future__ import annotations

import threading
import uuid

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from lestrade.localcluster.processes import wait_until


def test_server_is_tls_with_rbac(cluster, api_client) -> None:
    assert cluster.server.startswith("https://")
    version = k8s.VersionApi(api_client).get_code()
    assert version.git_version.startswith("v1.")
    groups = {g.name for g in k8s.ApisApi(api_client).get_api_versions().groups}
    assert "rbac.authorization.k8s.io" in groups


def test_object_written_is_observed_through_a_watch(api_client, namespace) -> None:
    core = k8s.CoreV1Api(api_client)
    seen: list[tuple[str, str]] = []
    observed = threading.Event()
    name = f"cm-{uuid.uuid4().hex[:6]}"

    def watch() -> None:
        w = k8s_watch.Watch()
        for event in w.stream(core.list_namespaced_config_map, namespace, timeout_seconds=30):
            seen.append((event["type"], event["object"].metadata.name))
            if event["object"].metadata.name == name:
                observed.set()
                w.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name), data={"k": "v"}))
    assert observed.wait(30), f"watch never delivered {name}; saw {seen}"
    assert ("ADDED", name) in seen


def test_service_account_token_is_bound_by_rbac(cluster, api_client, namespace) -> None:
    """A minted token authenticates as the ServiceAccount and gets only what RBAC grants."""
    path = cluster.kubeconfig_for(namespace, "reader")
    with k8s_config.new_client_from_config(config_file=str(path)) as sa_client:
        sa_core = k8s.CoreV1Api(sa_client)
        with pytest.raises(k8s.ApiException) as denied:
            sa_core.list_namespaced_pod(namespace)
        assert denied.value.status == 403
        assert f"system:serviceaccount:{namespace}:reader" in denied.value.body

        rbac = k8s.RbacAuthorizationV1Api(api_client)
        rbac.create_namespaced_role(
            namespace,
            k8s.V1Role(
                metadata=k8s.V1ObjectMeta(name="pod-reader"),
                rules=[k8s.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])],
            ),
        )
        rbac.create_namespaced_role_binding(
            namespace,
            k8s.V1RoleBinding(
                metadata=k8s.V1ObjectMeta(name="reader"),
                role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
                subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
            ),
        )
        wait_until("RBAC grant", lambda: sa_core.list_namespaced_pod(namespace) is not None, 30)
        with pytest.raises(k8s.ApiException) as still_denied:
            sa_core.list_namespaced_secret(namespace)
        assert still_denied.value.status == 403


def _deployment(name: str, annotations: dict[str, str] | None = None) -> k8s.V1Deployment:
    labels = {"app": name}
    return k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1DeploymentSpec(
            replicas=2,
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels, annotations=annotations),
                spec=k8s.V1PodSpec(
                    containers=[k8s.V1Container(name="app", image="example.com/app:1.0")],
                    tolerations=[k8s.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists")],
                ),
            ),
        ),
    )


def test_deployment_pods_run_on_kwok_nodes(cluster, api_client, namespace) -> None:
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment("web"))

    def pods_running() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

    wait_until("2 Running pods", pods_running, 60)
    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert {p.spec.node_name for p in pods} <= set(cluster.nodes)
    assert all(p.status.pod_ip for p in pods)
    rs = apps.list_namespaced_replica_set(namespace).items
    assert len(rs) == 1 and rs[0].metadata.owner_references[0].name == "web"
    wait_until(
        "deployment available",
        lambda: apps.read_namespaced_deployment(name="web", namespace=namespace).status.available_replicas == 2,
        60,
    )


def test_crashloop_stage_reports_oomkilled(api_client, namespace) -> None:
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    apps.create_namespaced_deployment(
        namespace, _deployment("checkout", {"lestrade.dev/simulate": "crashloop", "lestrade.dev/restart-count": "7"})
    )

    def crashlooping() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="app=checkout").items
        return len(pods) == 2 and all(p.status.container_statuses for p in pods)

    wait_until("crash-looping pods", crashlooping, 60)
    pod = core.list_namespaced_pod(namespace, label_selector="app=checkout").items[0]
    status = pod.status.container_statuses[0]
    assert status.state.waiting.reason == "CrashLoopBackOff"
    assert status.last_state.terminated.reason == "OOMKilled"
    assert status.last_state.terminated.exit_code == 137
    assert status.restart_count == 7
    assert not status.ready


def test_pod_logs_served_by_kwok(api_client, namespace, kwok_logs) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="logger"),
            spec=k8s.V1PodSpec(
                containers=[k8s.V1Container(name="app", image="example.com/app:1.0")],
                tolerations=[k8s.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists")],
            ),
        ),
    )
    wait_until("pod Running", lambda: core.read_namespaced_pod("logger", namespace).status.phase == "Running", 60)
    kwok_logs(
        namespace, "logger", "hello from now\nsecond line", previous="java.lang.OutOfMemoryError: Java heap space"
    )

    def logs() -> str:
        return core.read_namespaced_pod_log("logger", namespace, container="app")

    wait_until("logs served", lambda: "second line" in logs(), 30)
    assert logs().splitlines() == ["hello from now", "second line"]
    previous = core.read_namespaced_pod_log("logger", namespace, container="app", previous=True)
    assert "OutOfMemoryError" in previous


def test_pod_annotations_declare_simulated_logs(api_client, namespace) -> None:
    """What the examples use: logs declared on the pod, served through the real logs API."""
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(
                name="declared",
                annotations={
                    "lestrade.dev/logs": "restarting",
                    "lestrade.dev/previous-logs": "FATAL: open /etc/app/config.yaml: no such file or directory",
                },
            ),
            spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="app", image="example.com/app:1.0")]),
        ),
    )
    wait_until("pod Running", lambda: core.read_namespaced_pod("declared", namespace).status.phase == "Running", 60)

    def previous() -> str:
        return core.read_namespaced_pod_log("declared", namespace, previous=True)

    wait_until("previous logs served", lambda: "FATAL" in previous(), 30)
    assert previous().strip() == "FATAL: open /etc/app/config.yaml: no such file or directory"
    assert core.read_namespaced_pod_log("declared", namespace).strip() == "restarting"
