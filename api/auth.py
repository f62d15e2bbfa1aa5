"""Who may call the API: Kubernetes decides.

A caller sends a Kubernetes bearer token (a ServiceAccount's, or a user's from their
kubeconfig). The API asks the apiserver whether the token is valid (TokenReview) and whether its
owner may create Investigations in the API's namespace (SubjectAccessReview), since every API
call ends up creating or reading Lestrade resources there. So access is granted and revoked with
ordinary RBAC, and the API holds no credentials of its own to leak.

On by default in-cluster; off by default on a developer's machine (`make run`), where the API
listens on 127.0.0.1 only. `LESTRADE_API_AUTH=true|false` overrides both.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse
from kubernetes import client as k8s
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response

from lestrade.resources import GROUP, INVESTIGATION_PLURAL

__all__ = ["TokenAuthenticator", "AuthMiddleware", "auth_enabled", "PUBLIC_PATHS"]

PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})


def auth_enabled(env: dict[str, str] | None = None, in_cluster: bool = False) -> bool:
    env = dict(os.environ if env is None else env)
    value = env.get("LESTRADE_API_AUTH")
    if value is None or value == "":
        return in_cluster
    return value.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    status: int
    reason: str
    user: str = ""


class TokenAuthenticator:
    """TokenReview + SubjectAccessReview, with a short cache so a busy client costs two
    apiserver calls per `ttl` seconds, not per request."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str, ttl: float = 30.0) -> None:
        self._auth = k8s.AuthenticationV1Api(api_client)
        self._authz = k8s.AuthorizationV1Api(api_client)
        self.namespace = namespace
        self.ttl = ttl
        self._cache: dict[str, tuple[float, Verdict]] = {}

    async def check(self, token: str) -> Verdict:
        cached = self._cache.get(token)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        verdict = await asyncio.to_thread(self._review, token)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[token] = (time.monotonic() + self.ttl, verdict)
        return verdict

    def _review(self, token: str) -> Verdict:
        review = self._auth.create_token_review(
            k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token))
        )
        if not review.status or not review.status.authenticated:
            return Verdict(False, 401, "the bearer token is not valid for this cluster")
        user = review.status.user
        access = self._authz.create_subject_access_review(
            k8s.V1SubjectAccessReview(
                spec=k8s.V1SubjectAccessReviewSpec(
                    user=user.username,
                    groups=user.groups,
                    uid=user.uid,
                    resource_attributes=k8s.V1ResourceAttributes(
                        group=GROUP, resource=INVESTIGATION_PLURAL, verb="create",
                        namespace=self.namespace,
                    ),
                )
            )
        )
        if not access.status.allowed:
            return Verdict(
                False, 403,
                f"{user.username} may not create {INVESTIGATION_PLURAL}.{GROUP} in namespace "
                f"{self.namespace}; grant it with a Role/RoleBinding",
                user.username,
            )
        return Verdict(True, 200, "", user.username)


class AuthMiddleware(BaseHTTPMiddleware):
    def __init__(self, app: object, authenticator: TokenAuthenticator) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.authenticator = authenticator

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path in PUBLIC_PATHS:
            return await call_next(request)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return JSONResponse(
                {"detail": "authentication required: send 'Authorization: Bearer <kubernetes token>'"},
                status_code=401, headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            verdict = await self.authenticator.check(token.strip())
        except k8s.ApiException as exc:
            return JSONResponse(
                {"detail": f"cannot verify the token with the Kubernetes API: {exc.reason}"},
                status_code=503,
            )
        if not verdict.allowed:
            return JSONResponse({"detail": verdict.reason}, status_code=verdict.status)
        request.state.user = verdict.user
        return await call_next(request)
