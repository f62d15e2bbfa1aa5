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

__all__ = ["TOOLS_ACCOUNT", "tools_read_rules", "ensure_tools_account"]

TOOLS_ACCOUNT = "lestrade-tools"
_RBAC_TEMPLATE = Path(__file__).resolve().parents[2] / "charts" / "lestrade" / "templates" / "rbac.yaml"


def tools_read_rules(template: Path = _RBAC_TEMPLATE) -> list[dict[str, Any]]:
    """The rules of the chart's `-tools-read` ClusterRole (they contain no template code)."""
    for document in template.read_text().split("\n---\n"):
        if re.search(r"^kind: ClusterRole$", document, re.M) and re.search(r"-tools-read$", document, re.M):
            rules_text = document[document.index("\nrules:") :]
            return list(yaml.safe_load(rules_text)["rules"])
    raise ValueError(f"no -tools-read ClusterRole in {template}")


def _create(create: Any, *args: Any) -> None:
    try:
        create(*args)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise


def ensure_tools_account(api_client: k8s.ApiClient, namespace: str = "default",
                         name: str = TOOLS_ACCOUNT, *, role: str = "lestrade-tools-read") -> str:
    """Creates (if missing) the ServiceAccount, the read-only ClusterRole and their binding;
    returns `namespace/name` for LESTRADE_TOOLS_SERVICE_ACCOUNT."""
    core, rbac = k8s.CoreV1Api(api_client), k8s.RbacAuthorizationV1Api(api_client)
    _create(core.create_namespaced_service_account, namespace,
            k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=name)))
    rules = [k8s.V1PolicyRule(**{k.replace("apiGroups", "api_groups"): v for k, v in r.items()})
             for r in tools_read_rules()]
    try:
        rbac.create_cluster_role(k8s.V1ClusterRole(metadata=k8s.V1ObjectMeta(name=role), rules=rules))
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        rbac.replace_cluster_role(role, k8s.V1ClusterRole(metadata=k8s.V1ObjectMeta(name=role), rules=rules))
    binding = f"{role}-{namespace}-{name}"
    _create(rbac.create_cluster_role_binding, k8s.V1ClusterRoleBinding(
        metadata=k8s.V1ObjectMeta(name=binding),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
        subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)],
    ))
    return f"{namespace}/{name}"
