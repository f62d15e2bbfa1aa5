"""The tools' own identity: a read-only ServiceAccount, never the operator's credentials.

The operator mints a short-lived token for the tools' ServiceAccount with the TokenRequest API
(`create serviceaccounts/token` on that one account is all it needs), and gives the tools only
that: an ApiClient carrying the token (renewed before it expires) for the Kubernetes tools, and
a kubeconfig in a private folder for bash's kubectl. The chart binds the account to the
read-only ClusterRole (never Secrets); `lestrade run` creates the account and the binding on its
local cluster. The folder also holds the CA and bash's working folder.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

__all__ = ["ToolsIdentity", "parse_service_account"]

logger = logging.getLogger(__name__)

TOKEN_SECONDS = 3600
_RENEW_AFTER = 0.5  # of the token's lifetime: a run starting now keeps a valid token 30 min


def parse_service_account(value: str, default_namespace: str) -> tuple[str, str]:
    """`name` or `namespace/name` -> (namespace, name)."""
    namespace, _, name = value.rpartition("/")
    return namespace or default_namespace, name


class ToolsIdentity:
    """Token, kubeconfig and ApiClient of the tools' ServiceAccount, minted with `operator`'s client."""

    def __init__(
        self, operator: k8s.ApiClient, namespace: str, service_account: str, *, seconds: int = TOKEN_SECONDS
    ) -> None:
        self.namespace = namespace
        self.service_account = service_account
        self.seconds = max(seconds, 600)
        self._core = k8s.CoreV1Api(operator)
        self._lock = threading.Lock()
        self._renew_at = 0.0
        self.folder = Path(tempfile.mkdtemp(prefix="lestrade-tools-id-"))  # 0700
        atexit.register(shutil.rmtree, self.folder, True)  # the token does not outlive us
        try:
            self._set_up(operator)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)  # a failed start leaves no folder
            raise

    def _set_up(self, operator: k8s.ApiClient) -> None:
        self.kubeconfig = self.folder / "kubeconfig"
        self.workdir = self.folder / "work"
        self.workdir.mkdir(mode=0o700)
        source = operator.configuration
        self._server = source.host
        self._verify = source.verify_ssl
        self._ca = self._copy_ca(source.ssl_ca_cert)
        configuration = k8s.Configuration()
        configuration.host = source.host
        configuration.verify_ssl = source.verify_ssl
        configuration.ssl_ca_cert = str(self._ca) if self._ca else None
        configuration.api_key_prefix["authorization"] = "Bearer"
        configuration.refresh_api_key_hook = lambda _cfg: self.refresh()  # type: ignore[assignment]
        self.api_client = k8s.ApiClient(configuration)
        self.refresh()

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def _copy_ca(self, source: str | None) -> Path | None:
        # In-cluster the CA sits next to the operator's token, which tool processes cannot read.
        if not source:
            return None
        target = self.folder / "ca.crt"
        shutil.copyfile(source, target)
        return target

    def refresh(self) -> None:
        """Mints a new token when the current one is past half its life (thread-safe)."""
        with self._lock:
            if time.monotonic() < self._renew_at:
                return
            request = k8s.AuthenticationV1TokenRequest(
                spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=self.seconds)
            )
            token = self._core.create_namespaced_service_account_token(  # type: ignore[union-attr]
                self.service_account, self.namespace, request
            ).status.token
            self.api_client.configuration.api_key["authorization"] = token
            self._write_kubeconfig(token)  # type: ignore[arg-type]
            self._renew_at = time.monotonic() + self.seconds * _RENEW_AFTER
            logger.info("minted a token for the tools identity %s", self.username)

    def _write_kubeconfig(self, token: str) -> None:
        cluster: dict[str, Any] = {"server": self._server}
        if self._ca:
            cluster["certificate-authority"] = str(self._ca)
        if not self._verify:
            cluster["insecure-skip-tls-verify"] = True
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": cluster}],
            "users": [{"name": "lestrade-tools", "user": {"token": token}}],
            "contexts": [{"name": "tools", "context": {"cluster": "cluster", "user": "lestrade-tools"}}],
            "current-context": "tools",
        }
        staging = self.kubeconfig.with_suffix(".new")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(yaml.safe_dump(config, sort_keys=False))
        os.replace(staging, self.kubeconfig)  # kubectl never reads a half-written file

    def close(self) -> None:
        self.api_client.close()
        shutil.rmtree(self.folder, ignore_errors=True)
