"""The plugin's connection to the cluster: the kubeconfig's credentials, context and namespace.

Every read and write goes through the shared request layer (`lestrade.kube`) with the
kubeconfig's own identity, so RBAC, admission and audit see the person at the keyboard, exactly
as for `kubectl patch`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from lestrade.kube import ApiException, Kube, api_path, is_not_found, resource_path
from lestrade.resources import CONVERSATION_PLURAL, INVESTIGATION_PLURAL

__all__ = ["Session", "NotFound", "PLURALS"]

PLURALS = {
    "inv": INVESTIGATION_PLURAL,
    "investigation": INVESTIGATION_PLURAL,
    INVESTIGATION_PLURAL: INVESTIGATION_PLURAL,
    "conv": CONVERSATION_PLURAL,
    "conversation": CONVERSATION_PLURAL,
    CONVERSATION_PLURAL: CONVERSATION_PLURAL,
}


class NotFound(Exception):
    """No Investigation or Conversation of that name."""


@dataclass
class Session:
    kube: Kube
    namespace: str

    @classmethod
    def open(cls, kubeconfig: str | None, context: str | None, namespace: str | None) -> Session:
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        if not namespace:
            _, active = k8s_config.list_kube_config_contexts(config_file=path)
            if context:
                contexts, _ = k8s_config.list_kube_config_contexts(config_file=path)
                active = next((c for c in contexts if c["name"] == context), active)
            namespace = (active or {}).get("context", {}).get("namespace") or "default"
        return cls(Kube(k8s.ApiClient(configuration)), namespace)

    async def close(self) -> None:
        await self.kube.aclose()

    async def whoami(self) -> str:
        """The kubeconfig's user as the apiserver knows it (SelfSubjectReview)."""
        try:
            review = await self.kube.create(
                api_path("authentication.k8s.io/v1", "selfsubjectreviews"),
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
        except ApiException:
            return "(unknown user)"
        return str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "(unknown user)")

    async def resolve(self, ref: str) -> tuple[str, dict[str, Any]]:
        """`NAME`, `inv/NAME` or `conv/NAME` → (plural, object). A bare name is looked up as an
        Investigation first, then as a Conversation."""
        kind, sep, name = ref.partition("/")
        candidates = [PLURALS[kind]] if sep and kind in PLURALS else [INVESTIGATION_PLURAL, CONVERSATION_PLURAL]
        name = name if sep and kind in PLURALS else ref
        for plural in candidates:
            try:
                return plural, await self.kube.get(resource_path(plural, self.namespace, name))
            except ApiException as exc:
                if not is_not_found(exc):
                    raise
        raise NotFound(f"no investigation or conversation {name!r} in namespace {self.namespace}")
