"""A real local Kubernetes control plane built from pinned Go modules (see `build`, `cluster`)."""

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
