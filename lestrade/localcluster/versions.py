"""The pinned versions of every control-plane component, and how each is built.

Changing a version here is the whole upgrade: the cache folder name includes the version, so the
next run builds the new binaries beside the old ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "ALERTMANAGER_VERSION",
    "Component",
    "COMPONENTS",
    "KUBERNETES_VERSION",
    "RUN_COMPONENTS",
    "COLD_BUILD_SECONDS",
]

KUBERNETES_VERSION = "1.35.4"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
HELM_VERSION = "3.22.0"
# the chart's manifest linter (tests/chart): schemas come from the local apiserver, not the network
KUBECONFORM_VERSION = "0.8.0"
# the alerting tools' tests run a real Alertmanager (Apache-2.0); built only when a test needs it
# 0.31.1: later releases embed a UI bundle (ui/app/dist) that their module zip lacks, so `go build` fails
ALERTMANAGER_VERSION = "0.31.1"

# What `make run` starts (the control plane); everything else is built by the tests that use it,
# when they are first collected (lestrade.testing.binaries).
RUN_COMPONENTS: tuple[str, ...] = ("kubernetes", "etcd", "kwok")

# A cold build (empty Go module and build caches) on a 2-core machine, for the estimate the build
# prints before it starts. Measured: Kubernetes alone 9 m 54 s, all six one after the other
# 21 m 47 s; the split of the other 11 m 53 s between them is an estimate (each `go build` step
# is now timed in `<cache>/<component>-<version>.build.log`, so a quiet cold build can replace it).
COLD_BUILD_SECONDS: dict[str, int] = {
    "kubernetes": 600,
    "etcd": 120,
    "kwok": 140,
    "helm": 150,
    "kubeconform": 30,
    "prometheus": 260,
    "otelcol": 300,
    "alertmanager": 300,
}


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    module: str
    packages: dict[str, str]  # binary name → Go package to build
    ldflags: dict[str, str] = field(default_factory=dict)
    staging_replaces: bool = False
    # files of the module's source copied next to the binaries: module-relative path → file name
    assets: dict[str, str] = field(default_factory=dict)
    # built only when asked for by name (a test's fixture), not by `make binaries`
    on_demand: bool = False

    @property
    def module_version(self) -> str:
        return f"v{self.version}"

    @property
    def binaries(self) -> list[str]:
        return list(self.packages)


def _kube_ldflags(version: str) -> dict[str, str]:
    major, minor, _ = version.split(".")
    prefix = "k8s.io/component-base/version"
    return {
        f"{prefix}.gitVersion": f"v{version}",
        f"{prefix}.gitMajor": major,
        f"{prefix}.gitMinor": minor,
        f"{prefix}.gitTreeState": "clean",
        # client-go reports the same version (kubectl version shows it)
        "k8s.io/client-go/pkg/version.gitVersion": f"v{version}",
        "k8s.io/client-go/pkg/version.gitMajor": major,
        "k8s.io/client-go/pkg/version.gitMinor": minor,
    }


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in [
        Component(
            name="kubernetes",
            version=KUBERNETES_VERSION,
            module="k8s.io/kubernetes",
            packages={
                "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
                "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
                "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
                "kubectl": "k8s.io/kubernetes/cmd/kubectl",
            },
            ldflags=_kube_ldflags(KUBERNETES_VERSION),
            staging_replaces=True,
        ),
        Component(
            name="etcd",
            version=ETCD_VERSION,
            module="go.etcd.io/etcd/server/v3",
            packages={"etcd": "go.etcd.io/etcd/server/v3"},
        ),
        Component(
            name="kwok",
            version=KWOK_VERSION,
            module="sigs.k8s.io/kwok",
            packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
            assets={
                "kustomize/stage/node/fast/node-initialize.yaml": "stages/node-initialize.yaml",
                "kustomize/stage/node/heartbeat/node-heartbeat.yaml": "stages/node-heartbeat.yaml",
                "kustomize/stage/pod/fast/pod-ready.yaml": "stages/pod-ready.yaml",
                "kustomize/stage/pod/fast/pod-complete.yaml": "stages/pod-complete.yaml",
                "kustomize/stage/pod/fast/pod-delete.yaml": "stages/pod-delete.yaml",
                "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml": "crds/logs.yaml",
                "kustomize/crd/bases/kwok.x-k8s.io_clusterlogs.yaml": "crds/clusterlogs.yaml",
            },
        ),
        Component(
            name="helm",
            version=HELM_VERSION,
            module="helm.sh/helm/v3",
            packages={"helm": "helm.sh/helm/v3/cmd/helm"},
        ),
        Component(
            name="kubeconform",
            version=KUBECONFORM_VERSION,
            module="github.com/yannh/kubeconform",
            packages={"kubeconform": "github.com/yannh/kubeconform/cmd/kubeconform"},
        ),
        Component(
            name="alertmanager",
            version=ALERTMANAGER_VERSION,
            module="github.com/prometheus/alertmanager",
            packages={"alertmanager": "github.com/prometheus/alertmanager/cmd/alertmanager"},
            on_demand=True,
        ),
    ]
}
