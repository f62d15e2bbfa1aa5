"""kubectl's discovery cache, which must not outlive the cluster it describes.

kubectl keeps the API discovery of a cluster for six hours in
`<cache dir>/discovery/<host_port>/` (cache dir: `$KUBECACHEDIR`, else `~/.kube/cache`), keyed
by nothing but the server's host and port. A local control plane that comes up on a host:port
an earlier cluster used (the stable 6443 of `make run`, or a random port a test cluster had)
inherits that cluster's cache, and since a category (`kubectl get lestrade`) is looked up in
the cache only, kubectl answers `the server doesn't have a resource type "lestrade"`. Every
kubectl (any version, ours or the user's) reads the same layout, so removing the entry once the
CRDs are installed is enough: the next kubectl call fetches discovery afresh.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

__all__ = ["discovery_cache_dirs", "forget_discovery"]

# kubectl's own rule (cli-runtime computeDiscoverCacheDir): scheme stripped, then every
# character but word characters, `/`, `.`, `(` and `)` becomes `_`.
_ILLEGAL = re.compile(r"[^(\w/.)]", re.ASCII)


def _cache_key(server: str) -> str:
    host = server.replace("https://", "", 1).replace("http://", "", 1)
    return _ILLEGAL.sub("_", host)


def discovery_cache_dirs(server: str, env: Mapping[str, str] | None = None) -> list[Path]:
    """Where kubectl may cache discovery for `server`: under `$KUBECACHEDIR` (when set) and
    under `~/.kube/cache` (what a kubectl started without that variable uses)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    roots = [home / ".kube" / "cache"]
    if env.get("KUBECACHEDIR"):
        roots.insert(0, Path(env["KUBECACHEDIR"]))
    return [root / "discovery" / _cache_key(server) for root in roots]


def forget_discovery(server: str, env: Mapping[str, str] | None = None) -> list[Path]:
    """Removes kubectl's cached discovery of `server`; returns the folders it removed."""
    removed = []
    for folder in discovery_cache_dirs(server, env):
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
