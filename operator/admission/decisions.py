"""Admission check for `spec.decisions`: reject bad decisions at `kubectl patch` time.

A decision for a call id that is not waiting for one (a typo, an id from another
Investigation, a call that never needed approval), and a change to a decision already made,
are refused by the apiserver with a message naming the ids and the calls that *are* pending,
so the person sees the mistake in the terminal where they made it instead of in a status
condition later. It is a ValidatingAdmissionPolicy (CEL, evaluated inside the apiserver): no
webhook server, no certificates, nothing that can be down.

Only updates of the main resource are checked (status writes are a separate subresource); the
pending calls are read from the *old* object's status, which is what the person looked at.
The operator still judges decisions itself (condition `DecisionsAccepted`) for clusters where
the policy is not installed.

`python -m lestrade.operator.admission.decisions` prints the manifests (the chart's template is this
output, and a test keeps them equal).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import yaml

from lestrade.kube import ApiException, Kube, api_path
from lestrade.operator.admission.validating import deny_binding, validating_policy
from lestrade.resources.constants import CONVERSATION_PLURAL, GROUP, INVESTIGATION_PLURAL, VERSION

__all__ = ["POLICY_NAME", "policy_manifests", "install_admission_policy", "main"]

logger = logging.getLogger(__name__)

POLICY_NAME = "lestrade-investigation-decisions"  # name kept: it also covers Conversations
FIELD_MANAGER = "lestrade-operator"


def _variables() -> list[dict[str, str]]:
    ids = "{o}.spec.decisions.map(k, k)"
    return [
        {"name": "newIds", "expression": f"has(object.spec.decisions) ? {ids.format(o='object')} : []"},
        {"name": "oldIds", "expression": f"has(oldObject.spec.decisions) ? {ids.format(o='oldObject')} : []"},
        {
            "name": "pendingIds",
            "expression": "has(oldObject.status) && has(oldObject.status.pendingApprovals) ? "
            "oldObject.status.pendingApprovals.map(p, p.toolCallId) : []",
        },
        {
            "name": "unknown",
            "expression": "variables.newIds.filter(k, !(k in variables.oldIds) && !(k in variables.pendingIds))",
        },
        {
            "name": "changed",
            "expression": "variables.oldIds.filter(k, !(k in variables.newIds) || "
            "object.spec.decisions[k] != oldObject.spec.decisions[k])",
        },
    ]


def policy_manifests() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding."""
    policy = validating_policy(
        POLICY_NAME,
        {
            # matchConstraints is atomic for server-side apply: spell out the server's defaults
            # so every applier (the operator, the chart) applies the very same value.
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "namespaceSelector": {},
                "objectSelector": {},
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["UPDATE"],
                        "resources": [INVESTIGATION_PLURAL, CONVERSATION_PLURAL],
                        "scope": "*",
                    }
                ],
            },
            "variables": _variables(),
            "validations": [
                {
                    "expression": "size(variables.unknown) == 0",
                    "messageExpression": "'spec.decisions: ' + variables.unknown.join(', ') + "
                    "' not waiting for a decision (pending: ' + "
                    "(size(variables.pendingIds) == 0 ? 'none' : "
                    "variables.pendingIds.join(', ')) + '); see status.pendingApprovals'",
                    "reason": "Invalid",
                },
                {
                    "expression": "size(variables.changed) == 0",
                    "messageExpression": "'spec.decisions: ' + variables.changed.join(', ') + "
                    "' already decided; a decision cannot be changed or removed'",
                    "reason": "Invalid",
                },
            ],
        },
    )
    return [policy, deny_binding(POLICY_NAME)]


async def install_admission_policy(kube: Kube) -> bool:
    """Applies the policy (server-side apply); False when this identity may not (logged)."""
    plurals = {
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }
    for manifest in policy_manifests():
        path = api_path(manifest["apiVersion"], plurals[manifest["kind"]], name=manifest["metadata"]["name"])
        try:
            await kube.request(
                "PATCH",
                path,
                manifest,
                query={"fieldManager": FIELD_MANAGER, "force": "true"},
                content_type="application/apply-patch+yaml",
            )
        except ApiException as exc:
            if exc.status in (401, 403, 404):
                logger.warning(
                    "not installing the decisions admission policy (%s); bad decisions are "
                    "reported in the DecisionsAccepted condition instead",
                    exc.reason,
                )
                return False
            raise
    return True


def main() -> int:
    print("# Generated by `python -m lestrade.operator.admission.decisions`; do not edit.")
    print(yaml.safe_dump_all(policy_manifests(), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
