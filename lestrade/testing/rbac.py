"""RBAC for test users: a Role of resource rules bound to one ServiceAccount."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from lestrade.resources import GROUP

__all__ = ["grant_lestrade_role", "grant_role"]


def grant_role(
    api_client: Any,
    namespace: str,
    account: str,
    rules: list[tuple[str, list[str]]],
    *,
    api_group: str,
    role: str | None = None,
) -> None:
    """A Role `role` (default: the account's name) of (resource of `api_group`, verbs) rules for
    the ServiceAccount `account` in `namespace`, and nothing else: tests give a user exactly the
    rights they are about."""
    name = role or account
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(
        namespace,
        k8s.V1Role(
            metadata=k8s.V1ObjectMeta(name=name),
            rules=[k8s.V1PolicyRule(api_groups=[api_group], resources=[r], verbs=v) for r, v in rules],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        k8s.V1RoleBinding(
            metadata=k8s.V1ObjectMeta(name=name),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=account, namespace=namespace)],
        ),
    )


def grant_lestrade_role(api_client: Any, namespace: str, account: str, rules: list[tuple[str, list[str]]]) -> None:
    """A Role of (lestrade.dev resource, verbs) rules for the ServiceAccount `account`."""
    grant_role(api_client, namespace, account, rules, api_group=GROUP)
