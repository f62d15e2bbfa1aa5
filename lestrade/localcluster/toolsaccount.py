"""The tools' read-only ServiceAccount on a cluster without the chart (`lestrade run`, tests).

The chart creates `<release>-tools` bound to its `-tools-read` ClusterRole; here the same
account is created with the same rules, read from the chart's template so there is one list,
and the operator mints tokens for it (LESTRADE_TOOLS_SERVICE_ACCOUNT), so under `make run` the
tools never act with the admin kubeconfig the operator itself uses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

__all__ = [
    "TOOLS_ACCOUNT",
    "SCOPES_NAMESPACE",
    "tools_read_rules",
    "ensure_tools_account",
    "ensure_tenancy",
    "ensure_scope_policy",
]

TOOLS_ACCOUNT = "lestrade-tools"
_RBAC_TEMPLATE = Path(__file__).resolve().parents[2] / "charts" / "lestrade" / "templates" / "rbac.yaml"
_TENANCY_TEMPLATE = _RBAC_TEMPLATE.with_name("tenancy.yaml")
SCOPES_NAMESPACE = "lestrade-scopes"


def tools_read_rules(template: Path = _RBAC_TEMPLATE, suffix: str = "-tools-read") -> list[dict[str, Any]]:
    """The static rules of the chart's `-tools-read` ClusterRole: those before any template code
    (`tools.extraReadRules` is appended by a `range` after them, and is empty by default)."""
    for document in template.read_text().split("\n---\n"):
        if re.search(r"^kind: ClusterRole$", document, re.M) and re.search(rf"{suffix}$", document, re.M):
            rules_text = document[document.index("\nrules:") :]
            if "{{" in rules_text:
                rules_text = rules_text[: rules_text.rindex("\n", 0, rules_text.index("{{"))]
            return list(yaml.safe_load(rules_text)["rules"])
    raise ValueError(f"no {suffix} ClusterRole in {template}")


def _rules(raw: list[dict[str, Any]]) -> list[k8s.V1PolicyRule]:
    return [
        k8s.V1PolicyRule(
            **{k.replace("apiGroups", "api_groups").replace("resourceNames", "resource_names"): v for k, v in r.items()}
        )
        for r in raw
    ]


def _apply_cluster_role(rbac: k8s.RbacAuthorizationV1Api, name: str, raw: list[dict[str, Any]]) -> None:
    role = k8s.V1ClusterRole(metadata=k8s.V1ObjectMeta(name=name), rules=_rules(raw))
    try:
        rbac.create_cluster_role(role)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        rbac.replace_cluster_role(name, role)


def ensure_tenancy(
    api_client: k8s.ApiClient, scopes_namespace: str = SCOPES_NAMESPACE, *, read_role: str = "lestrade-tools-read"
) -> str:
    """What the chart's tenancy.yaml creates, for a local cluster: the scopes namespace and the
    cluster-scoped reads of every account in it. Returns the namespace, for
    LESTRADE_SCOPES_NAMESPACE (the operator here acts as the cluster admin, so the chart's
    operator grants are not needed)."""
    core, rbac = k8s.CoreV1Api(api_client), k8s.RbacAuthorizationV1Api(api_client)
    _create(core.create_namespace, k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=scopes_namespace)))
    cluster_role = f"{read_role}-cluster"
    _apply_cluster_role(rbac, cluster_role, tools_read_rules(_TENANCY_TEMPLATE, "-tools-read-cluster"))
    _create(
        rbac.create_cluster_role_binding,
        k8s.V1ClusterRoleBinding(
            metadata=k8s.V1ObjectMeta(name=f"{cluster_role}-{scopes_namespace}"),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=cluster_role),
            subjects=[
                k8s.RbacV1Subject(
                    kind="Group",
                    api_group="rbac.authorization.k8s.io",
                    name=f"system:serviceaccounts:{scopes_namespace}",
                )
            ],
        ),
    )
    return scopes_namespace


def _create(create: Any, *args: Any) -> None:
    try:
        create(*args)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise


def ensure_tools_account(
    api_client: k8s.ApiClient,
    namespace: str = "default",
    name: str = TOOLS_ACCOUNT,
    *,
    role: str = "lestrade-tools-read",
) -> str:
    """Creates (if missing) the ServiceAccount, the read-only ClusterRole and their binding;
    returns `namespace/name` for LESTRADE_TOOLS_SERVICE_ACCOUNT."""
    core, rbac = k8s.CoreV1Api(api_client), k8s.RbacAuthorizationV1Api(api_client)
    _create(
        core.create_namespaced_service_account, namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=name))
    )
    _apply_cluster_role(rbac, role, tools_read_rules())
    binding = f"{role}-{namespace}-{name}"
    _create(
        rbac.create_cluster_role_binding,
        k8s.V1ClusterRoleBinding(
            metadata=k8s.V1ObjectMeta(name=binding),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)],
        ),
    )
    return f"{namespace}/{name}"


def ensure_scope_policy(
    api_client: k8s.ApiClient,
    grants: list[dict[str, Any]],
    namespace: str = "default",
    name: str = "lestrade-scope-policy",
) -> str:
    """Writes the scope policy ConfigMap (operator/tenancy/scopes.py); returns `namespace/name` for
    LESTRADE_SCOPE_POLICY."""
    core = k8s.CoreV1Api(api_client)
    body = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name=name), data={"grants.yaml": yaml.safe_dump({"grants": grants})}
    )
    try:
        core.create_namespaced_config_map(namespace, body)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(name, namespace, body)
    return f"{namespace}/{name}"
