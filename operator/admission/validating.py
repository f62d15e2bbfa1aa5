"""What the validating policies the operator installs share: their labels, the policy's frame
(refuse when the policy cannot be evaluated) and a binding that denies."""

from __future__ import annotations

from typing import Any

__all__ = ["LABELS", "deny_binding", "validating_policy"]

LABELS = {"app.kubernetes.io/name": "lestrade"}
"""On every policy and binding: the chart's and the operator's objects are found by it."""


def validating_policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy `name` with `spec` (its match, variables and validations);
    `failurePolicy: Fail`: a policy that cannot be evaluated refuses rather than lets through."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"failurePolicy": "Fail", **spec},
    }


def deny_binding(policy_name: str) -> dict[str, Any]:
    """The ValidatingAdmissionPolicyBinding that makes `policy_name` refuse (not warn or audit)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name, "labels": LABELS},
        "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
    }
