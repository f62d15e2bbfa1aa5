"""A real local Kubernetes control plane built from pinned Go modules (see `build`, `cluster`).

`versions` pins every component (Kubernetes, etcd, KWOK, Helm, kubeconform; Prometheus in
`prometheus`); `build` builds each in a throwaway Go module (for `k8s.io/kubernetes`, every
staging module is mapped to its published `v0.x` release) into
`~/.cache/lestrade/<component>-<version>/` (or `$LESTRADE_CACHE_DIR`), under a file lock.
`cluster` runs etcd, kube-apiserver (TLS, RBAC, service-account tokens), controller-manager,
scheduler and KWOK with free ports in a temp dir; `pki` makes the certificates; `processes`
gives every child its own session and a parent-death SIGKILL, so nothing outlives the Python
process. `serviceaccounts` mints tokens/kubeconfigs for any ServiceAccount (TokenRequest) so
code can run under the chart's exact RBAC; `kubectl_cache` clears kubectl's discovery cache of a
server. KWOK: `stages.yaml` adds a crash-loop stage (`lestrade.dev/simulate: crashloop`,
OOMKilled by default); `simlogs` serves container logs declared in pod annotations
(`lestrade.dev/logs`, `lestrade.dev/previous-logs`).
"""

from lestrade.localcluster.build import BuildError, binary_path, cache_root, ensure_binaries
from lestrade.localcluster.cluster import ExternalCluster, LocalCluster
from lestrade.localcluster.processes import StartupError

__all__ = [
    "BuildError",
    "StartupError",
    "LocalCluster",
    "ExternalCluster",
    "binary_path",
    "cache_root",
    "ensure_binaries",
]
