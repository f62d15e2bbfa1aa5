"""Admission policies that record who asked for a run, so nobody can name someone else.

- A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1beta1; Kubernetes 1.34+ with the
  `MutatingAdmissionPolicy` feature gate and API enabled) writes the creator's user name and
  groups, as the apiserver authenticated them, into the annotations
  `lestrade.dev/requested-by` and `lestrade.dev/requester-groups` of every new Investigation and
  Conversation — overwriting whatever the request carried.
- A ValidatingAdmissionPolicy (GA) refuses a create whose `requested-by` is not the caller's
  user name or whose `requester-groups` names a group the caller is not in, and any update
  that changes either annotation. On a cluster without the mutating policy, the annotations are
  therefore either truthful or absent (the API sets them for its callers; a run without them
  gets its own namespace only). It also refuses new turns in a Conversation from anyone but its
  creator, since every turn runs with the creator's scope, and any change of its history or
  context settings (`spec.context`, `spec.tombstoned`, the context store's
  `context-updated-at` / `context-write` stamps, which the API writes as the caller before each
  transcript append or compaction) likewise. The transcript chunks themselves (ConfigMaps)
  are guarded by the policy of `transcripts.py`, installed with this one.

Both are CEL inside the apiserver: no webhook, nothing that can be down. The API writes as the
HTTP caller (impersonation), so the caller, not the API, is recorded.
`python -m lestrade.operator.admission.requester > charts/lestrade/templates/requester-policy.yaml`
regenerates the chart's template (a test keeps them equal).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import yaml

from lestrade.kube import ApiException, Kube, api_path
from lestrade.operator.admission.transcripts import transcript_manifests
from lestrade.operator.admission.validating import LABELS, deny_binding, validating_policy
from lestrade.resources.constants import CONVERSATION_PLURAL, GROUP, INVESTIGATION_PLURAL, VERSION
from lestrade.resources.keys import CONTEXT_UPDATED_ANNOTATION, CONTEXT_WRITE_ANNOTATION
from lestrade.resources.tenancy import REQUESTED_BY_ANNOTATION, REQUESTER_GROUPS_ANNOTATION

# Stamped by the API's context store, as the caller, on every change of a Conversation's
# history (appends, compactions) and settings; the API's own constant, repeated here because
# the operator does not import the API (a test keeps them equal).

__all__ = [
    "POLICY_NAME",
    "validating_manifests",
    "mutating_manifests",
    "install_requester_policy",
    "chart_template",
    "main",
]

logger = logging.getLogger(__name__)

POLICY_NAME = "lestrade-requester"
FIELD_MANAGER = "lestrade-operator"
_GROUPS = "(has(request.userInfo.groups) ? request.userInfo.groups : [])"
_STAMP = CONTEXT_UPDATED_ANNOTATION


def _match(operations: list[str]) -> dict[str, Any]:
    return {
        "matchPolicy": "Equivalent",
        "namespaceSelector": {},
        "objectSelector": {},
        "resourceRules": [
            {
                "apiGroups": [GROUP],
                "apiVersions": [VERSION],
                "operations": operations,
                "resources": [INVESTIGATION_PLURAL, CONVERSATION_PLURAL],
                "scope": "*",
            }
        ],
    }


def _annotations(obj: str) -> str:
    return f"(has({obj}.metadata.annotations) ? {obj}.metadata.annotations : {{}})"


def validating_manifests() -> list[dict[str, Any]]:
    by, groups = REQUESTED_BY_ANNOTATION, REQUESTER_GROUPS_ANNOTATION
    policy = validating_policy(
        POLICY_NAME,
        {
            "matchConstraints": _match(["CREATE", "UPDATE"]),
            "variables": [
                {"name": "new", "expression": _annotations("object")},
                {"name": "old", "expression": f"request.operation == 'UPDATE' ? {_annotations('oldObject')} : {{}}"},
            ],
            "validations": [
                {
                    "expression": f"request.operation != 'CREATE' || !('{by}' in variables.new) || "
                    f"variables.new['{by}'] == request.userInfo.username",
                    "messageExpression": f"'metadata.annotations[{by}]: must be your own user name (' + "
                    "request.userInfo.username + '); it is recorded by the cluster, leave it out'",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"request.operation != 'CREATE' || !('{groups}' in variables.new) || "
                    f"variables.new['{groups}'].split(',').all(g, g == '' || g in {_GROUPS})",
                    "message": f"metadata.annotations[{groups}]: names a group you are not in; it is "
                    "recorded by the cluster, leave it out",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"request.operation != 'UPDATE' || ["
                    f"'{by}', '{groups}'].all(k, (k in variables.new) == (k in variables.old) && "
                    "(!(k in variables.new) || variables.new[k] == variables.old[k]))",
                    "message": f"metadata.annotations[{by}] and [{groups}] record who created this "
                    "resource and cannot be changed",
                    "reason": "Forbidden",
                },
                {
                    # A new turn runs with the creator's scope: only the creator may ask.
                    "expression": f"request.operation != 'UPDATE' || request.resource.resource != "
                    f"'{CONVERSATION_PLURAL}' || !('{by}' in variables.old) || "
                    f"variables.old['{by}'] == request.userInfo.username || !has(object.spec.turns) || "
                    "(has(oldObject.spec.turns) && size(object.spec.turns) <= size(oldObject.spec.turns))",
                    "messageExpression": f"'spec.turns: only ' + variables.old['{by}'] + ' may ask in "
                    "this Conversation (every turn reads with the scope of its creator); start a "
                    "Conversation of your own'",
                    "reason": "Forbidden",
                },
                {
                    # The history is what the next turn follows, with the creator's scope.
                    "expression": f"request.operation != 'UPDATE' || request.resource.resource != "
                    f"'{CONVERSATION_PLURAL}' || !('{by}' in variables.old) || "
                    f"variables.old['{by}'] == request.userInfo.username || ("
                    f"['{_STAMP}', '{CONTEXT_WRITE_ANNOTATION}'].all(k, (k in variables.new) == (k in variables.old) && "
                    "(!(k in variables.new) || variables.new[k] == variables.old[k])) && "
                    "has(object.spec.context) == has(oldObject.spec.context) && "
                    "(!has(object.spec.context) || object.spec.context == oldObject.spec.context) && "
                    "(has(object.spec.tombstoned) ? object.spec.tombstoned : false) == "
                    "(has(oldObject.spec.tombstoned) ? oldObject.spec.tombstoned : false))",
                    "messageExpression": f"'the history and context of this Conversation: only ' + "
                    f"variables.old['{by}'] + ' may change them (the next turn follows them with the "
                    "scope of its creator)'",
                    "reason": "Forbidden",
                },
            ],
        },
    )
    return [policy, deny_binding(POLICY_NAME), *transcript_manifests()]


def mutating_manifests() -> list[dict[str, Any]]:
    by, groups = REQUESTED_BY_ANNOTATION, REQUESTER_GROUPS_ANNOTATION
    expression = (
        "Object{metadata: Object.metadata{annotations: {"
        f"'{by}': request.userInfo.username, '{groups}': {_GROUPS}.join(',')"
        "}}}"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": LABELS},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": _match(["CREATE"]),
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": LABELS},
        "spec": {"policyName": POLICY_NAME},
    }
    return [policy, binding]


_PLURALS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}


async def _apply(kube: Kube, manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        path = api_path(manifest["apiVersion"], _PLURALS[manifest["kind"]], name=manifest["metadata"]["name"])
        await kube.request(
            "PATCH",
            path,
            manifest,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )


async def install_requester_policy(kube: Kube) -> tuple[bool, bool]:
    """Applies both policies (server-side apply): (validating installed, mutating installed).
    The mutating one needs the beta API; without it the API and kubectl users set the
    annotations themselves and the validating policy keeps them truthful."""
    installed = []
    for manifests, what in ((validating_manifests(), "validating"), (mutating_manifests(), "mutating")):
        try:
            await _apply(kube, manifests)
            installed.append(True)
        except ApiException as exc:
            if exc.status not in (401, 403, 404):
                raise
            logger.warning("not installing the %s requester policy (%s)", what, exc.reason)
            installed.append(False)
    return installed[0], installed[1]


def chart_template() -> str:
    """The chart's templates/requester-policy.yaml."""
    return (
        "{{- if .Values.admissionPolicy.enabled }}\n"
        "# Generated by `python -m lestrade.operator.admission.requester`; do not edit.\n"
        + yaml.safe_dump_all(validating_manifests(), sort_keys=False)
        + "{{- if .Values.tenancy.mutatingPolicy }}\n---\n"
        + yaml.safe_dump_all(mutating_manifests(), sort_keys=False)
        + "{{- end }}\n{{- end }}\n"
    )


def main() -> int:
    print(chart_template(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
