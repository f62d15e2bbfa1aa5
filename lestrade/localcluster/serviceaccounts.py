"""Credentials for ServiceAccounts, so code can run under the exact RBAC it will have in-cluster.

The operator and the API run under the chart's ServiceAccount in production; tests mint a token
for that account with the TokenRequest API and run them with it, so a missing RBAC rule fails a
test instead of a user's cluster.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from lestrade.localcluster.kubeconfig import write_kubeconfig

__all__ = ["ServiceAccountTokens"]


class ServiceAccountTokens:
    """Mixin for clusters that have `kubeconfig`, `server` and (optionally) `ca_file`."""

    kubeconfig: Path
    server: str

    def api_client(self) -> k8s.ApiClient:
        """A new admin ApiClient (the caller closes it)."""
        return k8s_config.new_client_from_config(config_file=str(self.kubeconfig))

    def token_for(self, namespace: str, service_account: str, *, seconds: int = 3600, create: bool = True) -> str:
        """A bearer token for `namespace/service_account`, created if missing when `create`."""
        with self.api_client() as api:
            core = k8s.CoreV1Api(api)
            if create:
                try:
                    core.create_namespaced_service_account(
                        namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=service_account))
                    )
                except k8s.ApiException as exc:
                    if exc.status != 409:
                        raise
            request = k8s.AuthenticationV1TokenRequest(
                spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
            )
            return core.create_namespaced_service_account_token(  # type: ignore[return-value]
                service_account, namespace, request
            ).status.token

    def kubeconfig_for(self, namespace: str, service_account: str, path: Path | None = None) -> Path:
        """A kubeconfig that authenticates as the ServiceAccount (token minted now)."""
        token = self.token_for(namespace, service_account)
        path = path or Path(tempfile.mkdtemp(prefix="lestrade-sa-")) / "kubeconfig"
        return write_kubeconfig(
            path,
            server=self.server,
            ca_file=self._ca_file(),
            user=f"{namespace}-{service_account}",
            token=token,
            namespace=namespace,
        )

    def _ca_file(self) -> Path:
        ca = getattr(self, "ca_file", None)
        if ca:
            return Path(ca)
        with self.api_client() as api:
            path = Path(tempfile.mkdtemp(prefix="lestrade-ca-")) / "ca.crt"
            source = api.configuration.ssl_ca_cert
            path.write_bytes(Path(source).read_bytes() if source else b"")
            return path
