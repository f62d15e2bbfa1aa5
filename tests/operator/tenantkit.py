"""Helpers of the tenant-isolation tests: a tenant with a real token, another tenant's
namespace holding a fact, the tenancy setup the chart makes, and the requester policies."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from opkit import create_inv, wait_until

from lestrade.kube import Kube
from lestrade.localcluster.toolsaccount import ensure_scope_policy, ensure_tenancy, ensure_tools_account
from lestrade.operator.admission.requester import install_requester_policy
from lestrade.resources import GROUP
from lestrade.resources.tenancy import REQUESTED_BY_ANNOTATION
from lestrade.testing.rbac import grant_lestrade_role as grant_kinds

__all__ = [
    "Tenancy",
    "tenancy_setup",
    "make_tenant",
    "tenant_client",
    "other_namespace",
    "install_requester_policies",
    "grant_kinds",
]

_policies_installed = threading.Lock()
_installed: list[bool] = []


def install_requester_policies(api_client: k8s.ApiClient, namespace: str) -> None:
    """Applies both requester policies (once per session) and waits until the apiserver enforces
    the mutating one: a new object gets the annotation without asking for it."""
    with _policies_installed:
        if not _installed:

            async def apply() -> tuple[bool, bool]:
                kube = Kube(api_client)
                try:
                    return await install_requester_policy(kube)
                finally:
                    await kube.aclose()

            result: list[tuple[bool, bool]] = []
            worker = threading.Thread(target=lambda: result.append(asyncio.run(apply())))
            worker.start()
            worker.join()
            assert result == [(True, True)], result
            _installed.append(True)
    custom = k8s.CustomObjectsApi(api_client)

    def recorded() -> bool:
        name = f"probe-{uuid.uuid4().hex[:6]}"
        try:
            created = create_inv(api_client, namespace, name)
        except k8s.ApiException as exc:
            if exc.status == 503:  # the policy's type checker has not seen the new CRDs yet
                return False
            raise
        custom.delete_namespaced_custom_object(GROUP, "v1alpha1", namespace, "investigations", name)
        return REQUESTED_BY_ANNOTATION in (created["metadata"].get("annotations") or {})

    wait_until("the requester policy to be enforced", recorded, timeout=60, interval=0.3)


class Tenancy:
    """What the operator is given: the cluster tools account, the scopes namespace, the policy."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.tools_account = ensure_tools_account(api_client, namespace)
        self.scopes_namespace = ensure_tenancy(api_client, f"{namespace}-scopes")
        self.policy = self.grant([])

    def grant(self, grants: list[dict[str, Any]]) -> str:
        """Replaces the admin's scope policy."""
        self.policy = ensure_scope_policy(self.api_client, grants, self.namespace)
        return self.policy

    def settings(self) -> dict[str, Any]:
        return {
            "tenancy_tools_service_account": self.tools_account,
            "tenancy_scopes_namespace": self.scopes_namespace,
            "tenancy_scope_policy": self.policy,
        }

    def close(self) -> None:
        rbac, core = k8s.RbacAuthorizationV1Api(self.api_client), k8s.CoreV1Api(self.api_client)
        for name in (
            f"lestrade-tools-read-{self.namespace}-lestrade-tools",
            f"lestrade-tools-read-cluster-{self.scopes_namespace}",
        ):
            try:
                rbac.delete_cluster_role_binding(name)
            except k8s.ApiException as exc:
                if exc.status != 404:
                    raise
        core.delete_namespace(self.scopes_namespace, propagation_policy="Background")


@contextmanager
def tenancy_setup(api_client: k8s.ApiClient, namespace: str) -> Iterator[Tenancy]:
    tenancy = Tenancy(api_client, namespace)
    try:
        yield tenancy
    finally:
        tenancy.close()


def make_tenant(cluster: Any, api_client: k8s.ApiClient, namespace: str, account: str = "tenant") -> str:
    """A ServiceAccount that may create and read Investigations and Conversations in `namespace`
    only; returns its user name."""
    grant_kinds(
        api_client,
        namespace,
        account,
        [("investigations", ["create", "get", "list", "patch"]), ("conversations", ["create", "get", "list", "patch"])],
    )
    return f"system:serviceaccount:{namespace}:{account}"


@contextmanager
def tenant_client(cluster: Any, namespace: str, account: str = "tenant") -> Iterator[k8s.ApiClient]:
    """An ApiClient authenticated with the tenant's own token (TokenRequest)."""
    path = cluster.kubeconfig_for(namespace, account)
    client = k8s_config.new_client_from_config(config_file=str(path))
    try:
        yield client
    finally:
        client.close()


@contextmanager
def other_namespace(api_client: k8s.ApiClient, fact: str) -> Iterator[str]:
    """Another tenant's namespace with a pod whose annotation holds `fact`."""
    core = k8s.CoreV1Api(api_client)
    name = f"tenant-b-{uuid.uuid4().hex[:6]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels={"lestrade.dev/test": "true"})))
    try:
        core.create_namespaced_pod(
            name,
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name="payroll", annotations={"team-b/plan": fact}),
                spec=k8s.V1PodSpec(
                    containers=[k8s.V1Container(name="app", image="payroll:1")],
                    node_selector={"lestrade.test/no-such-node": "true"},
                ),
            ),
        )
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")
