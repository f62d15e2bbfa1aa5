"""What the validating policies the operator installs share: their labels and a binding that denies."""

from __future__ import annotations

from typing import Any

__all__ = ["LABELS", "deny_binding"]

LABELS = {"app.kubernetes.io/name": "lestrade"}
"""On every policy and binding: the chart's and the operator's objects are found by it."""


def deny_binding(policy_name: str) -> dict[str, Any]:
    """The ValidatingAdmissionPolicyBinding that makes `policy_name` refuse (not warn or audit)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name, "labels": LABELS},
        "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
    }
