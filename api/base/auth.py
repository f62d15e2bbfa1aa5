"""Who may call the API: Kubernetes decides.

A caller sends a Kubernetes bearer token (a ServiceAccount's, or a user's from their
kubeconfig). The API asks the apiserver whether the token is valid (TokenReview) and whether its
owner may create Investigations in the API's namespace (SubjectAccessReview), since every API
call ends up creating or reading Lestrade resources there. Before each write it makes on the
caller's behalf, it asks again for that write (`authorize`: create conversations for a new
chat, patch conversations for a follow-up or an approval, get for a resumed stream), so a
caller who may not patch a Conversation with kubectl cannot approve its calls over HTTP
either. So access is granted and revoked with ordinary RBAC, and the API holds no credentials
of its own to leak (it needs no impersonation rights). Automation without a Kubernetes identity
can use static API keys from a Secret (`load_api_keys`); a key allows what the API does.

On by default in-cluster; off by default on a developer's machine (`make run`), where the API
listens on 127.0.0.1 only. `LESTRADE_API_AUTH=true|false` overrides both.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response

from lestrade.kube import Acting, ApiException, Kube, api_path
from lestrade.resources import GROUP, INVESTIGATION_PLURAL
from lestrade.resources.tenancy import REQUESTED_BY_ANNOTATION, REQUESTER_GROUPS_ANNOTATION

__all__ = [
    "TokenAuthenticator",
    "AuthMiddleware",
    "auth_enabled",
    "authorize",
    "load_api_keys",
    "PUBLIC_PATHS",
    "PUBLIC_PREFIXES",
    "requester_annotations",
]

PUBLIC_PATHS = frozenset(
    {
        "/healthz",
        "/readyz",
        "/metrics",
        "/",
        "/health/live",
        "/health/ready",
        # Slack's callbacks carry Slack's signature, not a token (api/slack)
        "/api/slack/interactions",
        "/.well-known/agent-card.json",
    }
)
PUBLIC_PREFIXES = (
    "/console/",
    # a signed decision link is its own credential (api/decisions)
    "/api/delivery/decisions/",
)
"""The web console's page and files hold no data (console.py); its data needs a token. Nor
does the A2A agent card (what the agent offers and where: `agents/a2a_agent.py`)."""


def auth_enabled(env: Mapping[str, str], in_cluster: bool = False) -> bool:
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
    subject: tuple[tuple[str, object], ...] = ()
    """The caller as a SubjectAccessReview spec names it (user, groups, uid, extra)."""
    api_key: bool = False
    """Authenticated by a static API key (no Kubernetes identity to ask RBAC about)."""


class TokenAuthenticator:
    """TokenReview + SubjectAccessReview, with a short cache so a busy client costs two
    apiserver calls per `ttl` seconds, not per request."""

    def __init__(self, kube: Kube, namespace: str, ttl: float = 30.0) -> None:
        self._kube = kube
        self.namespace = namespace
        self.ttl = ttl
        self._cache: dict[str, tuple[float, Verdict]] = {}
        self._permissions: dict[str, tuple[float, bool]] = {}

    async def check(self, token: str) -> Verdict:
        cached = self._cache.get(token)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        verdict = await self._review(token)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[token] = (time.monotonic() + self.ttl, verdict)
        return verdict

    async def _review(self, token: str) -> Verdict:
        review = await self._kube.create(
            api_path("authentication.k8s.io/v1", "tokenreviews"),
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return Verdict(False, 401, "the bearer token is not valid for this cluster")
        user = status.get("user") or {}
        username = user.get("username", "")
        subject = (
            ("user", username),
            ("groups", user.get("groups") or []),
            ("uid", user.get("uid") or ""),
            ("extra", user.get("extra") or {}),
        )
        if not await self._allowed(subject, "create", INVESTIGATION_PLURAL):
            return Verdict(
                False,
                403,
                f"{username} may not create {INVESTIGATION_PLURAL}.{GROUP} in namespace "
                f"{self.namespace}; grant it with a Role/RoleBinding",
                username,
            )
        return Verdict(True, 200, "", username, subject)

    async def _allowed(self, subject: tuple[tuple[str, object], ...], verb: str, resource: str) -> bool:
        access = await self._kube.create(
            api_path("authorization.k8s.io/v1", "subjectaccessreviews"),
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    **dict(subject),
                    "resourceAttributes": {
                        "group": GROUP,
                        "resource": resource,
                        "verb": verb,
                        "namespace": self.namespace,
                    },
                },
            },
        )
        return bool((access.get("status") or {}).get("allowed"))

    async def may(self, verdict: Verdict, verb: str, resource: str) -> bool:
        """Whether the caller may `verb` `resource` (lestrade.dev) in the API's namespace:
        asked before the API writes on the caller's behalf, so RBAC decides for HTTP users as
        it does for kubectl users (cached like tokens)."""
        key = repr((verdict.subject, verb, resource))
        cached = self._permissions.get(key)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        allowed = await self._allowed(verdict.subject, verb, resource)
        if len(self._permissions) > 10_000:
            self._permissions.clear()
        self._permissions[key] = (time.monotonic() + self.ttl, allowed)
        return allowed


def load_api_keys(env: Mapping[str, str]) -> dict[str, str]:
    """Static API keys: one file per key in `LESTRADE_API_KEYS_DIR` (a mounted Secret: the
    file name names the key, its content is the key). None configured: {}."""
    folder = env.get("LESTRADE_API_KEYS_DIR")
    if not folder or not os.path.isdir(folder):
        return {}
    keys: dict[str, str] = {}
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if not entry.startswith(".") and os.path.isfile(path):
            value = open(path).read().strip()
            if value:
                keys[entry] = value
    return keys


class AuthMiddleware(BaseHTTPMiddleware):
    """Kubernetes bearer tokens, or one of the static API keys (`X-API-Key: <key>` or
    `Authorization: Bearer <key>`). A key's holder may do whatever the API does in its
    namespace: keys are for automation that has no Kubernetes identity."""

    def __init__(
        self, app: object, authenticator: TokenAuthenticator, api_keys: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.authenticator = authenticator
        self.api_keys = dict(api_keys or {})

    def _key_owner(self, presented: str) -> str | None:
        found = None
        for name, key in self.api_keys.items():  # every key compared: no early exit to time
            if hmac.compare_digest(presented.encode(), key.encode()):
                found = name
        return found

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path in PUBLIC_PATHS or request.url.path.startswith(PUBLIC_PREFIXES):
            return await call_next(request)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        presented = request.headers.get("x-api-key") or (token.strip() if scheme.lower() == "bearer" else "")
        owner = self._key_owner(presented) if presented and self.api_keys else None
        if owner is not None:
            request.state.user = f"apikey:{owner}"
            request.state.verdict = Verdict(True, 200, "", f"apikey:{owner}", api_key=True)
            return await call_next(request)
        if request.headers.get("x-api-key") and not token:
            return _refusal(request, 401, "X-API-Key: not a valid API key")
        if scheme.lower() != "bearer" or not token:
            return _refusal(
                request,
                401,
                "authentication required: send 'Authorization: Bearer <kubernetes token>'"
                + (" or 'X-API-Key: <key>'" if self.api_keys else ""),
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            verdict = await self.authenticator.check(token.strip())
        except ApiException as exc:
            return _refusal(request, 503, f"cannot verify the token with the Kubernetes API: {exc.reason}")
        if not verdict.allowed:
            return _refusal(request, verdict.status, verdict.reason)
        request.state.user = verdict.user
        request.state.verdict = verdict
        return await call_next(request)


_CONTEXT_ERRORS = {401: "unauthorized", 403: "forbidden", 503: "unavailable"}


def _refusal(request: Request, status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """HolmesGPT's `{"detail"}`, or the context store's `{"error", "message"}` under /v1."""
    if request.url.path.startswith("/v1/"):
        body = {"error": _CONTEXT_ERRORS.get(status, "error"), "message": detail}
    else:
        body = {"detail": detail}
    return JSONResponse(body, status_code=status, headers=headers)


def writer_for(request: Request, kube: Kube) -> Kube | Acting:
    """What the API writes with on the caller's behalf: the caller's own identity when it has
    one (Kubernetes impersonation, so RBAC, admission and audit see the caller, exactly as for
    kubectl); the API's identity for API-key callers and with authentication off."""
    verdict: Verdict | None = getattr(request.state, "verdict", None)
    if verdict is None or verdict.api_key or not verdict.subject:
        return kube
    subject = dict(verdict.subject)
    extra = subject.get("extra") or {}
    return kube.acting_as(
        str(subject.get("user") or ""),
        list(subject.get("groups") or []),  # type: ignore[call-overload]
        str(subject.get("uid") or ""),
        {k: list(v) for k, v in dict(extra).items()},  # type: ignore[call-overload]
    )


def requester_annotations(writer: Kube | Acting | None) -> dict[str, str]:
    """The requester annotations of a resource written as the caller. The admission policies
    check them against the impersonated user (and, where the mutating policy is installed,
    write them anyway), so they are only ever the truth; an API-key caller gets none (its runs
    are the API's own: their namespace only)."""
    if not isinstance(writer, Acting):
        return {}
    user, groups = writer.requester
    return {REQUESTED_BY_ANNOTATION: user, REQUESTER_GROUPS_ANNOTATION: ",".join(groups)} if user else {}


async def authorize(request: Request, verb: str, resource: str) -> str | None:
    """None when the caller may `verb` `resource` (always, with authentication off); else why
    not. Asked before every write, so a refusal is a clear 403 naming the Role to grant (the
    write itself then goes as the caller, see `writer_for`)."""
    verdict: Verdict | None = getattr(request.state, "verdict", None)
    authenticator: TokenAuthenticator | None = getattr(request.app.state, "authenticator", None)
    if verdict is None or authenticator is None or verdict.api_key:
        return None
    if await authenticator.may(verdict, verb, resource):
        return None
    return (
        f"{verdict.user} may not {verb} {resource}.{GROUP} in namespace "
        f"{authenticator.namespace}; grant it with a Role/RoleBinding"
    )
