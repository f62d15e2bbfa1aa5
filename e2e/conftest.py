"""The `deployed` fixture: Lestrade as the chart installs it, for the scenarios of test_deployed.py.

Two targets, the same scenarios:
- default (`make test`): the chart rendered with helm and run on the session's local control
  plane (`LocalRelease`): its ServiceAccounts, RBAC, Secrets and settings applied for real, the
  pod's containers (operator, API, demo model) run as processes under the chart's
  ServiceAccount, with tokens minted for it.
- an existing cluster (`make e2e-kind`, e2e/kind/run.sh): LESTRADE_TEST_KUBECONFIG (admin
  kubeconfig, also used by the `cluster` fixture), LESTRADE_E2E_API_URL (the chart's Service,
  e.g. through `kubectl port-forward`), LESTRADE_E2E_RELEASE_NAMESPACE (default
  lestrade-system) and LESTRADE_E2E_NAMESPACE (where the scenarios create their workloads and
  Investigations; default lestrade-e2e, created when missing).
- the local control plane with the pod's containers run from a built image:
  LESTRADE_E2E_IMAGE=localhost/lestrade:dev (hack/image/verify.sh runs each container's command
  chrooted into the image, root filesystem read-only, as the image's USER; needs buildah).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from lestrade.testing.chart_pod import ChartPod
from lestrade.testing.local_release import LocalRelease, image_runner


@dataclass
class Deployed:
    api_url: str
    release_namespace: str  # the chart's namespace (the API creates Conversations there)
    namespace: str  # the scenarios' workloads and Investigations (watched by the operator)
    simulated: bool  # KWOK pods (logs served through kwok's Logs) rather than real containers
    pod: ChartPod | None = None  # the local processes, for their logs on failure

    def logs(self) -> str:
        return self.pod.logs() if self.pod else "(the chart's pods run in the cluster: kubectl logs)"


def _ensure_namespace(api_client: k8s.ApiClient, name: str) -> None:
    try:
        k8s.CoreV1Api(api_client).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture(scope="session")
def deployed(
    cluster: Any, api_client: k8s.ApiClient, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployed]:
    api_url = os.environ.get("LESTRADE_E2E_API_URL")
    if api_url:
        namespace = os.environ.get("LESTRADE_E2E_NAMESPACE", "lestrade-e2e")
        _ensure_namespace(api_client, namespace)
        yield Deployed(
            api_url.rstrip("/"),
            os.environ.get("LESTRADE_E2E_RELEASE_NAMESPACE", "lestrade-system"),
            namespace,
            simulated=False,
        )
        return
    # One namespace for the release and the scenarios: the operator watches only it, so the
    # operators other tests run in this session never see these Investigations, nor it theirs.
    namespace = f"lestrade-e2e-{uuid.uuid4().hex[:6]}"
    _ensure_namespace(api_client, namespace)
    release = LocalRelease(
        cluster,
        "e2e",
        namespace,
        Path(tmp_path_factory.mktemp("release")),
        values={"operator": {"watchNamespaces": [namespace]}},
        runner=image_runner(),
    )
    try:
        release.install()
        assert release.pod is not None
        api_port = int(release.pod.container("api")["ports"][0]["containerPort"])
        yield Deployed(release.pod.url(api_port), namespace, namespace, simulated=True, pod=release.pod)
    finally:
        release.uninstall()
        k8s.CoreV1Api(api_client).delete_namespace(namespace, propagation_policy="Background")
