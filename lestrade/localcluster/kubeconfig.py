"""Kubeconfig files for the admin, the control-plane components and service accounts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["write_kubeconfig"]


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_file: Path,
    user: str,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    token: str | None = None,
    namespace: str = "default",
    context: str = "lestrade-local",
) -> Path:
    credentials: dict[str, Any] = {}
    if client_cert and client_key:
        credentials = {"client-certificate": str(client_cert), "client-key": str(client_key)}
    if token:
        credentials = {"token": token}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lestrade-local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": {"cluster": "lestrade-local", "user": user, "namespace": namespace}}],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
