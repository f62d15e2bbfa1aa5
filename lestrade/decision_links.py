"""Signed decision links: how a generic webhook's receiver approves or denies the calls a run
waits for, without a Kubernetes identity of its own.

The operator puts `decisionUrl` into a webhook's `run.awaitingApproval` message: the API's URL
with a token naming the run (kind, namespace, name, uid), the exact calls (id and digest) and an
expiry, signed with HMAC-SHA256 under a key the operator and the API share (a Secret, path in
`LESTRADE_DECISION_KEY_FILE`). The link is a capability: whoever holds it may decide those calls
of that run until it expires, nothing else (the API checks uid, digests and that the calls still
wait). Shared ground: both processes import it, neither imports the other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DecisionLink", "InvalidLink", "make_token", "read_token", "load_key"]


class InvalidLink(ValueError):
    """A token that is malformed, not signed with the key, or expired."""


@dataclass(frozen=True)
class DecisionLink:
    kind: str
    namespace: str
    name: str
    uid: str
    calls: tuple[tuple[str, str | None], ...]
    """(tool call id, digest) of each call the link decides."""
    expires: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def load_key(path: str | None) -> bytes | None:
    if not path or not Path(path).is_file():
        return None
    key = Path(path).read_bytes().strip()
    return key or None


def make_token(key: bytes, link: DecisionLink) -> str:
    body = _b64(
        json.dumps(
            {
                "k": link.kind,
                "ns": link.namespace,
                "n": link.name,
                "u": link.uid,
                "c": [list(c) for c in link.calls],
                "e": link.expires,
            },
            separators=(",", ":"),
        ).encode()
    )
    mac = _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())
    return f"{body}.{mac}"


def read_token(key: bytes, token: str, *, now: float) -> DecisionLink:
    body, _, mac = token.partition(".")
    if not body or not mac:
        raise InvalidLink("not a decision token")
    try:
        expected = _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())
    except (ValueError, TypeError):
        raise InvalidLink("not a decision token") from None
    if not hmac.compare_digest(expected, mac):
        raise InvalidLink("the token's signature does not match")
    try:
        data = json.loads(_unb64(body))
        link = DecisionLink(
            str(data["k"]),
            str(data["ns"]),
            str(data["n"]),
            str(data["u"]),
            tuple((str(c[0]), c[1] if c[1] is None else str(c[1])) for c in data["c"]),
            int(data["e"]),
        )
    except (ValueError, KeyError, TypeError, IndexError):
        raise InvalidLink("not a decision token") from None
    if now > link.expires:
        raise InvalidLink("the link has expired")
    return link
