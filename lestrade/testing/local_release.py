"""A Helm release of the chart on the local control plane, with its pod run as processes.

`helm template` renders the chart (the pinned helm build); every object a cluster would store is
applied with server-side apply (CRDs, ServiceAccounts, RBAC, Secrets, ConfigMaps, admission
policies, peering objects); the Deployment's pod runs as processes (`ChartPod`) under the
chart's ServiceAccount. What needs a kubelet and a network (Services, NetworkPolicies, PDBs,
ServiceMonitors) is rendered but not applied: kind (`make e2e-kind`) covers those.

`upgrade()` is `helm upgrade` done the way the Deployment's rolling update does it: apply the
new objects, start the new pod, wait for it to be ready, then stop the old one (SIGTERM).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lestrade.localcluster import binary_path, ensure_binaries
from lestrade.localcluster.processes import wait_until
from lestrade.testing.chart_pod import ChartPod

__all__ = ["CHART", "render_chart", "image_runner", "LocalRelease", "NOT_APPLIED"]

CHART = Path(__file__).resolve().parents[2] / "charts" / "lestrade"
# Kinds that need a kubelet or a network to mean anything; the pod runs as processes instead.
NOT_APPLIED = {"Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget", "ServiceMonitor"}


def render_chart(
    release: str, namespace: str, values: dict[str, Any] | None = None, chart: Path = CHART
) -> list[dict[str, Any]]:
    """`helm template --include-crds` with `values`; fails with helm's message."""
    ensure_binaries(["helm"], quiet=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(values or {}, file)
        file.flush()
        proc = subprocess.run(
            [
                str(binary_path("helm")),
                "template",
                release,
                str(chart),
                "--namespace",
                namespace,
                "--include-crds",
                "-f",
                file.name,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"helm template failed: {proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def image_runner() -> list[str] | None:
    """With LESTRADE_E2E_IMAGE=<built image>, the pods' containers run from that image
    (hack/image/verify.sh: chrooted, root filesystem read-only, as the image's USER; needs
    buildah); else from this checkout."""
    image = os.environ.get("LESTRADE_E2E_IMAGE")
    if not image:
        return None
    os.environ["IMAGE"] = image  # read by verify.sh
    return [str(CHART.parents[1] / "hack" / "image" / "verify.sh")]


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [str(binary_path("kubectl")), f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:2])} failed: {proc.stderr}")
    return proc.stdout


@dataclass
class LocalRelease:
    cluster: Any  # LocalCluster | ExternalCluster
    name: str
    namespace: str
    workdir: Path
    values: dict[str, Any] = field(default_factory=dict)
    chart: Path = CHART
    revision: int = 0
    pod: ChartPod | None = None
    docs: list[dict[str, Any]] = field(default_factory=list)
    runner: list[str] | None = None  # ChartPod.runner: the image's code instead of this checkout's

    @property
    def deployment(self) -> dict[str, Any]:
        return next(d for d in self.docs if d["kind"] == "Deployment")

    def install(self) -> LocalRelease:
        self._apply(render_chart(self.name, self.namespace, self.values, self.chart))
        self.pod = self._new_pod().start()
        return self

    def upgrade(
        self, values: dict[str, Any] | None = None, chart: Path | None = None, runner: list[str] | None = None
    ) -> LocalRelease:
        """The new objects, then a rolling update of the pod (new one ready, old one stopped).
        `chart` and `runner` (another image, see ChartPod) make it an upgrade across versions."""
        self.values = self.values if values is None else values
        self.chart = chart or self.chart
        self.runner = runner or self.runner
        self._apply(render_chart(self.name, self.namespace, self.values, self.chart))
        old, self.pod = self.pod, self._new_pod().start()
        if old is not None:
            old.stop()
        return self

    def uninstall(self) -> None:
        if self.pod is not None:
            self.pod.stop()
        # CRDs and the admission policy (one fixed name, the operator's own) are shared with
        # whatever else runs on the cluster: left in place, as `helm uninstall` keeps CRDs.
        shared = {"CustomResourceDefinition", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
        kept = [d for d in self.docs if d["kind"] not in NOT_APPLIED | shared]
        if kept:
            subprocess.run(
                [
                    str(binary_path("kubectl")),
                    f"--kubeconfig={self.cluster.kubeconfig}",
                    "delete",
                    "--ignore-not-found",
                    "--wait=false",
                    "-f",
                    "-",
                ],
                input=yaml.safe_dump_all(kept),
                capture_output=True,
                text=True,
                timeout=120,
            )

    def _new_pod(self) -> ChartPod:
        self.revision += 1
        return ChartPod(
            self.deployment,
            self.cluster,
            self.workdir / f"pod-{self.revision}",
            pod_name=f"{self.name}-{self.revision}",
            runner=self.runner,
        )

    def _apply(self, docs: list[dict[str, Any]]) -> None:
        self.docs = docs
        kubeconfig = Path(self.cluster.kubeconfig)
        crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        rest = [d for d in docs if d["kind"] not in NOT_APPLIED and d["kind"] != "CustomResourceDefinition"]
        manager = ["--server-side", "--force-conflicts", "--field-manager=helm"]
        if crds:
            _kubectl(kubeconfig, "apply", *manager, "-f", "-", stdin=yaml.safe_dump_all(crds))
            for crd in crds:
                _kubectl(
                    kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
                )
        _kubectl(kubeconfig, "apply", *manager, "-f", "-", stdin=yaml.safe_dump_all(rest))
        # RBAC is enforced from the authorizer's cache: wait until the pod's account has its rights.
        account = self.deployment["spec"]["template"]["spec"].get("serviceAccountName", "default")
        wait_until(
            f"RBAC of {self.namespace}/{account}",
            lambda: (
                _kubectl(
                    kubeconfig,
                    "auth",
                    "can-i",
                    "patch",
                    "investigations.lestrade.dev",
                    "--subresource=status",
                    "-n",
                    self.namespace,
                    f"--as=system:serviceaccount:{self.namespace}:{account}",
                ).strip()
                == "yes"
            ),
            30,
        )
