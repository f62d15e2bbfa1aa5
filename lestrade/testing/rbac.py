"""RBAC for test users: a Role of Lestrade resource rules bound to one ServiceAccount."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from lestrade.resources import GROUP

__all__ = ["grant_lestrade_role"]


def grant_lestrade_role(api_client: Any, namespace: str, account: str, rules: list[tuple[str, list[str]]]) -> None:
    """A Role of (lestrade.dev resource, verbs) rules for the ServiceAccount `account` in
    `namespace`, and nothing else: tests give a user exactly the rights they are about."""
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(
        namespace,
        k8s.V1Role(
            metadata=k8s.V1ObjectMeta(name=account),
            rules=[k8s.V1PolicyRule(api_groups=[GROUP], resources=[r], verbs=v) for r, v in rules],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name=account),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=account),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=account, namespace=namespace)],
        ),
    )
