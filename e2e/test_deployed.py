"""Lestrade as the chart deploys it (see conftest.py: the local control plane with the chart's
ServiceAccounts, RBAC and settings, or a kind cluster with the image): the built-in demo model
investigates a crash-looping pod, and the HTTP API answers an authenticated user.

Every call goes through the identities the chart creates: the operator's ServiceAccount runs the
Investigation, the tools act as `<release>-tools` (read-only), the API impersonates the caller.
A missing RBAC rule or setting in the chart fails these scenarios.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.resources import GROUP

pytestmark = pytest.mark.binaries("helm")

LOG_LINE = "loading catalogue into memory: 1843 MiB"


@pytest.fixture(scope="module")
def crashing_pod(deployed: Any, api_client: k8s.ApiClient) -> Iterator[str]:
    """A Deployment whose pod crash-loops: simulated by KWOK locally (the annotations), for real
    on kind (the container prints LOG_LINE and exits 1)."""
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    name = f"inventory-api-{uuid.uuid4().hex[:5]}"
    labels = {"app": name}
    apps.create_namespaced_deployment(
        deployed.namespace,
        k8s.V1Deployment(
            metadata=k8s.V1ObjectMeta(name=name),
            spec=k8s.V1DeploymentSpec(
                replicas=1,
                selector=k8s.V1LabelSelector(match_labels=labels),
                template=k8s.V1PodTemplateSpec(
                    metadata=k8s.V1ObjectMeta(
                        labels=labels,
                        annotations={"lestrade.dev/simulate": "crashloop", "lestrade.dev/restart-count": "3"},
                    ),
                    spec=k8s.V1PodSpec(
                        containers=[
                            k8s.V1Container(
                                name="api", image="busybox:1.36", command=["sh", "-c", f"echo '{LOG_LINE}'; exit 1"]
                            )
                        ]
                    ),
                ),
            ),
        ),
    )

    def restarted_pod() -> str | None:
        pods = core.list_namespaced_pod(deployed.namespace, label_selector=f"app={name}").items
        statuses = pods[0].status.container_statuses if pods else None
        return pods[0].metadata.name if statuses and statuses[0].restart_count >= 1 else None

    wait_until("a crash-looping pod", lambda: restarted_pod() is not None, 180)
    yield str(restarted_pod())
    apps.delete_namespaced_deployment(name, deployed.namespace)


def _investigation(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, "v1alpha1", namespace, "investigations", name
    )


def test_an_investigation_runs_under_the_charts_identities(
    deployed: Any,
    api_client: k8s.ApiClient,
    crashing_pod: str,
    kwok_logs: Callable[..., None],
) -> None:
    namespace, pod = deployed.namespace, crashing_pod
    if deployed.simulated:
        kwok_logs(namespace, pod, "started", previous=LOG_LINE)
    name = f"crash-{uuid.uuid4().hex[:5]}"
    k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP,
        "v1alpha1",
        namespace,
        "investigations",
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "Investigation",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "title": "KubePodCrashLooping",
                "description": f"pod {pod} in namespace {namespace} keeps restarting",
            },
        },
    )

    def settled() -> bool:
        return (_investigation(api_client, namespace, name).get("status") or {}).get("phase") in ("Succeeded", "Failed")

    wait_until(f"Investigation {name} to settle", settled, 180)
    status = _investigation(api_client, namespace, name)["status"]
    assert status["phase"] == "Succeeded", (status, deployed.logs())
    # The tools read the pod, its previous logs and its events as the chart's tools account;
    # one missing rule would turn a call into an error.
    assert [(c["name"], c["status"]) for c in status["toolCalls"]] == [
        ("kubectl_find_resource", "success"),
        ("kubectl_describe", "success"),
        ("kubectl_previous_logs", "success"),
        ("kubectl_events", "success"),
    ], status["toolCalls"]
    analysis = status["analysis"]
    assert analysis.startswith("> **Demo model:**")
    for fact in (pod, namespace, "1843 MiB"):
        assert fact in analysis, f"{fact!r} missing from:\n{analysis}"


@pytest.fixture
def user_token(cluster: Any, api_client: k8s.ApiClient, deployed: Any) -> str:
    """A user allowed to chat in the release's namespace, and nothing else."""
    namespace, user = deployed.release_namespace, f"e2e-user-{uuid.uuid4().hex[:5]}"
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(
        namespace,
        k8s.V1Role(
            metadata=k8s.V1ObjectMeta(name=user),
            rules=[
                k8s.V1PolicyRule(
                    api_groups=[GROUP],
                    resources=["conversations", "investigations"],
                    verbs=["create", "get", "list", "watch", "patch", "update"],
                )
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name=user),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=user),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=user, namespace=namespace)],
        ),
    )
    return str(cluster.token_for(namespace, user))


def test_the_api_answers_an_authenticated_user_with_the_demo_model(
    deployed: Any,
    api_client: k8s.ApiClient,
    crashing_pod: str,
    user_token: str,
) -> None:
    ask = {"ask": f"Why is pod {crashing_pod} in namespace {deployed.namespace} crash-looping?"}
    with httpx.Client(base_url=deployed.api_url, timeout=180) as http:
        assert http.get("/readyz").status_code == 200
        # The chart turns authentication on: no token, no answer.
        refused = http.post("/api/chat", json=ask)
        assert refused.status_code == 401, refused.text
        response = http.post("/api/chat", json=ask, headers={"Authorization": f"Bearer {user_token}"})
    assert response.status_code == 200, (response.text, deployed.logs())
    answer = response.json()
    assert "Demo model" in answer["analysis"] and crashing_pod in answer["analysis"], answer["analysis"]
    conversation = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        GROUP, "v1alpha1", deployed.release_namespace, "conversations", answer["conversation_id"]
    )
    assert conversation["status"]["phase"]
