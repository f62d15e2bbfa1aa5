"""The hosted chat API's account and clusters (reference 002), and how a request's cluster is
found.

Lestrade answers about the cluster it runs in, so "the clusters connected to the account" are
names for that one cluster: the configured cluster names. The resolution order is 002's:

1. the request's `cluster_id` (404 when it is not a known cluster);
2. the payload's `cluster_name`, `cluster`, `cluster_id` (404 when they name an unknown
   cluster) or `source` (used only when it names a known cluster) — at the top level, then in
   its `labels` and `annotations`;
3. a known cluster name that appears in the ask or the payload's text (002 has a model read
   the payload; a plain word match needs no model call and cannot be talked into a name that
   is not configured);
4. the single known cluster;

otherwise 400, listing the known clusters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HostedSettings", "ClusterUnresolved", "resolve_cluster", "EXPLICIT_KEYS", "SOURCE_KEY"]

EXPLICIT_KEYS = ("cluster_name", "cluster", "cluster_id")
SOURCE_KEY = "source"


@dataclass(frozen=True)
class HostedSettings:
    """`from_env` reads `LESTRADE_ACCOUNT_ID`, `LESTRADE_CLUSTER_NAMES` (comma-separated) and
    `LESTRADE_CLUSTER_NAME` (the operator's; the fallback for the names)."""

    account_id: str | None = None
    """The one account this server answers for; None (as under `make run`): any account id,
    since one installation serves one account."""

    clusters: tuple[str, ...] = field(default=("default",))
    """Names of the cluster(s) this installation answers about; `cluster_id` must be one."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HostedSettings:
        names = [n.strip() for n in (env.get("LESTRADE_CLUSTER_NAMES") or "").split(",") if n.strip()]
        if not names and (env.get("LESTRADE_CLUSTER_NAME") or "").strip():
            names = [env["LESTRADE_CLUSTER_NAME"].strip()]
        return cls(
            account_id=(env.get("LESTRADE_ACCOUNT_ID") or "").strip() or None,
            clusters=tuple(dict.fromkeys(names)) or ("default",),
        )


class ClusterUnresolved(Exception):
    """The cluster cannot be determined (400) or is not known (404)."""

    def __init__(self, status: int, message: str, clusters: tuple[str, ...]) -> None:
        super().__init__(message)
        self.status, self.message, self.clusters = status, message, clusters


def _fields(payload: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, value) of the cluster-naming fields, top level first, then labels, annotations."""
    found: list[tuple[str, str]] = []
    for scope in (payload, payload.get("labels"), payload.get("annotations")):
        if isinstance(scope, Mapping):
            for key in (*EXPLICIT_KEYS, SOURCE_KEY):
                value = scope.get(key)
                if isinstance(value, str) and value.strip():
                    found.append((key, value.strip()))
    return found


def _mentioned(text: str, clusters: tuple[str, ...]) -> list[str]:
    return [c for c in clusters if re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", text)]


def resolve_cluster(given: str | None, payload: Mapping[str, Any] | None, ask: str, clusters: tuple[str, ...]) -> str:
    known = ", ".join(clusters)
    if given:
        if given in clusters:
            return given
        raise ClusterUnresolved(
            404, f"cluster_id: cluster {given!r} is not connected to this account; connected: {known}", clusters
        )
    payload = payload or {}
    for key, value in _fields(payload):
        if value in clusters:
            return value
        if key in EXPLICIT_KEYS:
            raise ClusterUnresolved(
                404,
                f"payload.{key}: cluster {value!r} is not connected to this account; connected: {known}",
                clusters,
            )
    text = ask + "\n" + json.dumps(payload, default=str, ensure_ascii=False)
    mentioned = _mentioned(text, clusters)
    if len(mentioned) == 1:
        return mentioned[0]
    if len(clusters) == 1:
        return clusters[0]
    raise ClusterUnresolved(
        400,
        f"cluster_id: cannot determine the cluster; pass cluster_id, one of: {known}",
        clusters,
    )
