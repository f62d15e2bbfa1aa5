"""Pytest fixtures for a real Kubernetes control plane.

By default the session starts a `LocalCluster` (built from pinned Go modules on first use, then
cached). `LESTRADE_TEST_KUBECONFIG=/path` points the suite at another cluster (kind, a dev
cluster) instead. There is no skipping: if the control plane cannot start, every test that needs
it errors with the reason (Go missing, a build failure and its log), so CI cannot pass silently.

Fixtures:
- `cluster`: `LocalCluster`/`ExternalCluster` (`.kubeconfig`, `.server`, `.token_for(ns, sa)`,
  `.kubeconfig_for(ns, sa)`, `.api_client()`, `.nodes` — KWOK node names).
- `api_client`: a session-wide admin `kubernetes.client.ApiClient`.
- `crds`: Lestrade's CRDs applied and Established.
- `namespace`: a fresh namespace per test (deleted afterwards, without waiting), whose `default`
  ServiceAccount exists so Pods can be created at once.
- `kwok_logs`: `kwok_logs(namespace, pod, text, previous=None, container=None)` serves `text` as
  the pod's logs (and `previous` as its previous container's) through the real logs API.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.cluster import ExternalCluster, LocalCluster
from lestrade.localcluster.processes import wait_until
from lestrade.localcluster.simlogs import as_cri_log
from lestrade.resources.keys import TEST_NAMESPACE_LABEL

__all__ = ["cluster", "api_client", "crds", "namespace", "kwok_logs"]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster | ExternalCluster]:
    external = os.environ.get("LESTRADE_TEST_KUBECONFIG")
    if external:
        yield ExternalCluster(Path(external))
        return
    local = LocalCluster.start(tmp_path_factory.mktemp("cluster"))
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def api_client(cluster: LocalCluster | ExternalCluster) -> Iterator[k8s.ApiClient]:
    client = cluster.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def crds(api_client: k8s.ApiClient) -> None:
    from lestrade.resources.install import install_crds

    install_crds(api_client, wait=True, timeout=60)


@pytest.fixture
def namespace(api_client: k8s.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    core = k8s.CoreV1Api(api_client)
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"t-{base}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels={TEST_NAMESPACE_LABEL: "true"})))

    def has_default_sa() -> bool:
        return bool(core.list_namespaced_service_account(name, field_selector="metadata.name=default").items)

    wait_until(f"ServiceAccount {name}/default", has_default_sa, timeout=30)
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def kwok_logs(api_client: k8s.ApiClient, tmp_path: Path) -> Callable[..., None]:
    custom = k8s.CustomObjectsApi(api_client)

    def serve(namespace: str, pod: str, text: str, previous: str | None = None, container: str | None = None) -> None:
        current = tmp_path / f"{namespace}-{pod}-{container or 'all'}.log"
        current.write_text(as_cri_log(text))
        log: dict[str, object] = {"logsFile": str(current), "follow": False}
        if previous is not None:
            old = tmp_path / f"{namespace}-{pod}-{container or 'all'}.previous.log"
            old.write_text(as_cri_log(previous))
            log["previousLogsFile"] = str(old)
        if container:
            log["containers"] = [container]
        custom.create_namespaced_custom_object(
            "kwok.x-k8s.io",
            "v1alpha1",
            namespace,
            "logs",
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": [log]},
            },
        )
        # KWOK picks the Logs object up from its own watch: wait until it serves them, so a
        # test never reads the logs of a pod KWOK does not know to serve yet.
        last_line = text.strip().splitlines()[-1] if text.strip() else None
        if last_line is not None:
            core = k8s.CoreV1Api(api_client)
            name = container or core.read_namespaced_pod(pod, namespace).spec.containers[0].name
            wait_until(
                f"KWOK to serve the logs of {namespace}/{pod}",
                lambda: last_line in core.read_namespaced_pod_log(pod, namespace, container=name),
                60,
            )

    return serve
