"""What a caller may read and do, per namespace: Kubernetes decides (SubjectAccessReview).

The console, `/api/findings` and the MCP and A2A servers show a run only to a caller who may
`get`/`list` it with kubectl, so each asks here. Answers are cached `ACCESS_TTL` seconds per
caller, verb, resource and namespace (a revoked RoleBinding takes effect within that time).
With authentication off or an API key, the API's own identity acts: always allowed.
"""

from __future__ import annotations

import time

from fastapi import Request

from lestrade.api.base.auth import Verdict
from lestrade.kube import Kube, api_path
from lestrade.resources import GROUP

__all__ = ["ACCESS_TTL", "may", "may_as"]

ACCESS_TTL = 30.0
"""Seconds a SubjectAccessReview answer is reused (as auth.py caches its own)."""


async def may(request: Request, verb: str, plural: str, namespace: str) -> bool:
    """Whether the caller of `request` may `verb` `plural` (lestrade.dev) in `namespace`."""
    return await may_as(request.app, getattr(request.state, "verdict", None), verb, plural, namespace)


async def may_as(app: object, verdict: Verdict | None, verb: str, plural: str, namespace: str) -> bool:
    """The same for a caller known by its verdict (a request's, or one kept by a task)."""
    if verdict is None or verdict.api_key or not verdict.subject:
        return True
    state = app.state  # type: ignore[attr-defined]
    cache: dict[str, tuple[float, bool]] = state.__dict__.setdefault("console_access", {})
    key = repr((verdict.subject, verb, plural, namespace))
    hit = cache.get(key)
    if hit and hit[0] > time.monotonic():
        return hit[1]
    kube: Kube = state.kube
    review = await kube.create(
        api_path("authorization.k8s.io/v1", "subjectaccessreviews"),
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                **dict(verdict.subject),
                "resourceAttributes": {"group": GROUP, "resource": plural, "verb": verb, "namespace": namespace},
            },
        },
    )
    allowed = bool((review.get("status") or {}).get("allowed"))
    if len(cache) > 10_000:
        cache.clear()
    cache[key] = (time.monotonic() + ACCESS_TTL, allowed)
    return allowed
