"""Who a Slack user is in Kubernetes: an explicit mapping in a ConfigMap the cluster admin keeps
(`LESTRADE_SLACK_USER_MAP=namespace/name`, default `<API namespace>/lestrade-slack-users`):

    data:
      U012ABCDEF: alice@example.com          # Slack user id -> Kubernetes user name
      U012ABCDEF.groups: sre,oncall          # optional: that user's groups

A key may also be `<team id>.<user id>` (checked first) when several workspaces share the API.
A Slack user not in the map is refused: nobody decides as anyone by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lestrade.kube import ApiException, Kube, is_not_found

__all__ = ["KubeIdentity", "identity_of", "read_user_map"]


@dataclass(frozen=True)
class KubeIdentity:
    user: str
    groups: tuple[str, ...] = ()


def identity_of(data: Mapping[str, str], team: str | None, user: str) -> KubeIdentity | None:
    for key in ([f"{team}.{user}"] if team else []) + [user]:
        name = (data.get(key) or "").strip()
        if name:
            groups = tuple(g.strip() for g in (data.get(f"{key}.groups") or "").split(",") if g.strip())
            return KubeIdentity(name, groups)
    return None


async def read_user_map(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    try:
        found = await kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except ApiException as exc:
        if is_not_found(exc):
            return {}
        raise
    return dict(found.get("data") or {})
