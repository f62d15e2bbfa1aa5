"""Admission policy for transcript chunks: nobody changes another user's history in ConfigMaps.

A run's transcript (what its next turn follows, with the scope of the run's creator) is stored
in ConfigMaps labelled `lestrade.dev/transcript-of` (`lestrade.runs.transcript`). Lestrade's
own identity writes them: the operator while it answers, the API's context store after the
caller's change was judged as the caller on the Conversation (`requester.py`). A user who may
create or patch ConfigMaps in that namespace could otherwise add a message to, or replace,
another user's history directly. So a ValidatingAdmissionPolicy on ConfigMaps that carry the
label (before or after the change) allows a create, update or delete only to

- a *transcript writer*: whoever RBAC grants the same verb on the resource `transcripts` of
  the group `lestrade.dev` in that namespace (not a real resource: the policy asks the
  authorizer, so the trust is an RBAC grant the chart gives Lestrade's service account and a
  cluster admin can read; the garbage collector and the namespace controller hold it through
  their wildcard grants), or
- the user named by the chunk's `lestrade.dev/transcript-author` annotation, before and after
  the change (a user's own chunk). Readers take such a chunk only into a run that this same
  user created (`lestrade.runs.transcript.owned_chunks`), so a chunk Mallory writes for Alice's
  Conversation is stored under Mallory's name and read by nobody.

Users write their history through the API or `spec.turns`, never as chunks; the author
exception only keeps a chunk someone could write harmless instead of forbidden for everyone.
CEL inside the apiserver like the other policies: no webhook, nothing that can be down.

What it leaves: whoever RBAC gives wildcard rights in the namespace (`resources: ["*"]`,
cluster admins) is a transcript writer; a user with ConfigMap create rights can take the
(predictable) name of a run's next chunk with a chunk of their own, which nobody reads but
which stops the run's next write (denial of service, no change of history); with the policy
not installed (`admissionPolicy.enabled: false`) only RBAC guards the chunks.
"""

from __future__ import annotations

from typing import Any

from lestrade.operator.admission.validating import deny_binding, validating_policy
from lestrade.resources.constants import GROUP
from lestrade.resources.keys import TRANSCRIPT_AUTHOR_ANNOTATION, TRANSCRIPT_LABEL

__all__ = ["POLICY_NAME", "WRITER_RESOURCE", "transcript_manifests"]

POLICY_NAME = "lestrade-transcripts"
WRITER_RESOURCE = "transcripts"
"""The pseudo-resource (group `lestrade.dev`) whose create/update/delete makes a transcript writer."""


def _author(obj: str) -> str:
    return (
        f"has({obj}.metadata.annotations) && '{TRANSCRIPT_AUTHOR_ANNOTATION}' in {obj}.metadata.annotations ? "
        f"{obj}.metadata.annotations['{TRANSCRIPT_AUTHOR_ANNOTATION}'] : ''"
    )


def transcript_manifests() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding."""
    verb = "request.operation == 'CREATE' ? 'create' : (request.operation == 'DELETE' ? 'delete' : 'update')"
    policy = validating_policy(
        POLICY_NAME,
        {
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "namespaceSelector": {},
                # matched when the old or the new object carries the label: removing it is a change too
                "objectSelector": {"matchExpressions": [{"key": TRANSCRIPT_LABEL, "operator": "Exists"}]},
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["configmaps"],
                        "scope": "*",
                    }
                ],
            },
            "variables": [
                {"name": "newAuthor", "expression": f"request.operation == 'DELETE' ? '' : ({_author('object')})"},
                {"name": "oldAuthor", "expression": f"request.operation == 'CREATE' ? '' : ({_author('oldObject')})"},
                {
                    "name": "writer",
                    "expression": f"authorizer.group('{GROUP}').resource('{WRITER_RESOURCE}')"
                    f".namespace(request.namespace).check({verb}).allowed()",
                },
            ],
            "validations": [
                {
                    "expression": "variables.writer || ("
                    "(request.operation == 'CREATE' || variables.oldAuthor == request.userInfo.username) && "
                    "(request.operation == 'DELETE' || variables.newAuthor == request.userInfo.username))",
                    "messageExpression": "'a run transcript chunk is written by Lestrade (or, annotated "
                    f"{TRANSCRIPT_AUTHOR_ANNOTATION}: ' + request.userInfo.username + ', by you for a run "
                    "you created): change the history of a run through the API or spec.turns'",
                    "reason": "Forbidden",
                },
            ],
        },
    )
    return [policy, deny_binding(POLICY_NAME)]
