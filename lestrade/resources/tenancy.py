"""Who asked for a run, and what its tools may read: the parts both processes share.

The requester is recorded at admission in two annotations of the Investigation or
Conversation (a MutatingAdmissionPolicy writes them from `request.userInfo`; a
ValidatingAdmissionPolicy refuses any other value and any later change, see
`lestrade.operator.admission.requester`), so the person asking cannot name someone else. The
operator copies them into `status.requester`, decides the run's scope from them and the
cluster admin's scope policy, and records that in `status.scope`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from lestrade.resources.common import WireModel
from lestrade.resources.keys import REQUESTED_BY_ANNOTATION, REQUESTER_GROUPS_ANNOTATION

__all__ = [
    "REQUESTED_BY_ANNOTATION",
    "REQUESTER_GROUPS_ANNOTATION",
    "Requester",
    "RunScope",
    "requester_of",
]


class Requester(WireModel):
    """The Kubernetes identity that created the resource, as the apiserver authenticated it."""

    username: str = Field(description="The user name the apiserver authenticated at creation.")
    groups: list[str] = Field(default_factory=list, description="That user's groups at creation.")


class RunScope(WireModel):
    """What the run's tools may read (the Kubernetes API enforces it: the tools act as an
    identity bound to exactly these namespaces)."""

    cluster: bool = Field(default=False, description="True when the tools may read every namespace.")
    namespaces: list[str] = Field(
        default_factory=list,
        description="The namespaces the tools may read (besides the cluster-scoped objects "
        "the chart allows, such as nodes); empty when cluster is true.",
    )
    identity: str | None = Field(default=None, description="The Kubernetes user the tools act as for this run.")
    reason: str = Field(default="", description="Why the run has this scope (which grants applied).")

    def describe(self) -> str:
        return "the whole cluster" if self.cluster else "namespace(s) " + ", ".join(self.namespaces)


def requester_of(metadata: Mapping[str, Any] | None) -> Requester | None:
    """The requester recorded at admission, or None when the object carries none (created
    before the policy was installed, or on a cluster without it)."""
    annotations = (metadata or {}).get("annotations") or {}
    username = annotations.get(REQUESTED_BY_ANNOTATION)
    if not isinstance(username, str) or not username:
        return None
    groups_text = annotations.get(REQUESTER_GROUPS_ANNOTATION)
    groups = [g for g in groups_text.split(",") if g] if isinstance(groups_text, str) else []
    return Requester(username=username, groups=groups)
