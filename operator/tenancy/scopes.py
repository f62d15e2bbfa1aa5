"""The scope decision: which namespaces a run's tools may read.

By default a run reads only the namespace of its resource. Wider scopes come only from the
cluster admin's scope policy — a ConfigMap in the operator's namespace (the chart renders it
from `tenancy.grants`), key `grants.yaml`:

    grants:
      - groups: [sre]              # the requester is in one of these groups ...
        namespaces: ["*"]          # ... so its runs may read the whole cluster
      - fromNamespaces: [team-a]   # runs of resources in team-a ...
        namespaces: [team-a-db]    # ... may also read team-a-db

      mcpServers:                  # MCPServers shared with other namespaces' runs,
        - servers: [platform/grafana, "tools/*"]   # namespace/name, or every one of a namespace
          fromNamespaces: [team-a]                 # same matching as a grant
        - servers: [platform/pagerduty]
          groups: [sre]

A grant with both `groups` and `fromNamespaces` needs both to match; a grant with neither
matches nothing. The requester is the identity recorded at admission (never a spec field), so
nothing a tenant writes into its own resource widens what its run reads. The policy is read at
the start of every attempt: a revoked grant applies to the next attempt.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

import yaml

from lestrade.kube import ApiException, Kube, api_path
from lestrade.resources.tenancy import Requester, RunScope

__all__ = ["Grant", "McpGrant", "ScopePolicy", "decide_scope", "load_policy", "POLICY_KEY", "ALL_NAMESPACES"]

logger = logging.getLogger(__name__)

POLICY_KEY = "grants.yaml"
ALL_NAMESPACES = "*"


@dataclass(frozen=True)
class Grant:
    """One line of the policy: who (groups) or from where (namespaces) may read what."""

    namespaces: tuple[str, ...]
    groups: tuple[str, ...] = ()
    from_namespaces: tuple[str, ...] = ()

    def applies(self, namespace: str, requester: Requester | None) -> bool:
        if not self.groups and not self.from_namespaces:
            return False
        if self.from_namespaces and namespace not in self.from_namespaces:
            return False
        if self.groups and (requester is None or not set(self.groups) & set(requester.groups)):
            return False
        return True

    def describe(self) -> str:
        who = []
        if self.groups:
            who.append("group " + "/".join(self.groups))
        if self.from_namespaces:
            who.append("runs in " + "/".join(self.from_namespaces))
        return f"{' and '.join(who)} -> {', '.join(self.namespaces)}"


@dataclass(frozen=True)
class McpGrant:
    """MCPServers (`namespace/name` or `namespace/*`) shared with the runs a grant would match."""

    servers: tuple[str, ...]
    who: Grant

    def covers(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self.servers or f"{namespace}/*" in self.servers


@dataclass(frozen=True)
class ScopePolicy:
    grants: tuple[Grant, ...] = ()
    error: str | None = None
    """Why the policy could not be read (then no grant applies)."""
    mcp_grants: tuple[McpGrant, ...] = ()

    def shared_mcp(self, namespace: str, requester: Requester | None) -> tuple[McpGrant, ...]:
        """The MCP sharing grants that apply to a run of `namespace` asked by `requester`."""
        return tuple(g for g in self.mcp_grants if g.who.applies(namespace, requester))


def _names(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where} must be a list of names")
    return tuple(value)


@functools.lru_cache(maxsize=4)
def parse_policy(text: str) -> ScopePolicy:
    """The policy from `grants.yaml`; an unreadable one grants nothing and says why.

    Remembered by its text (the value is immutable): every run reads the policy afresh, and
    parsing its YAML again for each of a burst's runs cost more than the read."""
    try:
        document = yaml.safe_load(text) or {}
        items = document.get("grants") or [] if isinstance(document, dict) else None
        if not isinstance(items, list):
            raise ValueError("grants must be a list")
        grants = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError(f"grants[{i}] must be a mapping")
            namespaces = _names(item.get("namespaces"), f"grants[{i}].namespaces")
            if not namespaces:
                raise ValueError(f"grants[{i}].namespaces is required")
            grants.append(
                Grant(
                    namespaces,
                    _names(item.get("groups"), f"grants[{i}].groups"),
                    _names(item.get("fromNamespaces"), f"grants[{i}].fromNamespaces"),
                )
            )
        shared = []
        mcp_items = document.get("mcpServers") or [] if isinstance(document, dict) else []
        if not isinstance(mcp_items, list):
            raise ValueError("mcpServers must be a list")
        for i, item in enumerate(mcp_items):
            if not isinstance(item, dict):
                raise ValueError(f"mcpServers[{i}] must be a mapping")
            servers = _names(item.get("servers"), f"mcpServers[{i}].servers")
            if not servers or not all(s.count("/") == 1 and all(s.split("/")) for s in servers):
                raise ValueError(f"mcpServers[{i}].servers: a list of namespace/name (or namespace/*)")
            shared.append(
                McpGrant(
                    servers,
                    Grant(
                        ("-",),
                        _names(item.get("groups"), f"mcpServers[{i}].groups"),
                        _names(item.get("fromNamespaces"), f"mcpServers[{i}].fromNamespaces"),
                    ),
                )
            )
        return ScopePolicy(tuple(grants), mcp_grants=tuple(shared))
    except (yaml.YAMLError, ValueError, AttributeError) as exc:
        return ScopePolicy(error=f"scope policy {POLICY_KEY}: {exc}")


_reads: dict[tuple[int, str], asyncio.Task[ScopePolicy]] = {}
"""Reads of a policy under way, by (client, ConfigMap)."""


async def load_policy(kube: Kube, ref: str | None) -> ScopePolicy:
    """The policy ConfigMap `namespace/name` (absent: no grants), read for this run.

    Runs that start while a read is under way share it (a burst of 200 runs made 200 GETs of
    the same object): each still gets the policy as it was at most one round trip before it
    asked, and never a remembered one."""
    if not ref:
        return ScopePolicy()
    key = (id(kube), ref)
    read = _reads.get(key)
    # A task keeps its loop and client alive, so the key cannot name another client meanwhile.
    if read is None or read.done() or read.get_loop() is not asyncio.get_running_loop():
        read = _reads[key] = asyncio.ensure_future(_read_policy(kube, ref))
        read.add_done_callback(lambda done: _reads.pop(key, None) if _reads.get(key) is done else None)
    return await asyncio.shield(read)


async def _read_policy(kube: Kube, ref: str) -> ScopePolicy:
    namespace, _, name = ref.rpartition("/")
    try:
        configmap = await kube.request("GET", api_path("v1", "configmaps", namespace, name))
    except ApiException as exc:
        if exc.status == 404:
            return ScopePolicy()
        logger.warning("cannot read the scope policy %s: %s", ref, exc.reason)
        return ScopePolicy(error=f"scope policy {ref} unreadable ({exc.status})")
    return parse_policy(str(((configmap or {}).get("data") or {}).get(POLICY_KEY) or ""))


def decide_scope(namespace: str, requester: Requester | None, policy: ScopePolicy) -> RunScope:
    """The run's own namespace, plus every grant that applies to it and its requester."""
    applied = [g for g in policy.grants if g.applies(namespace, requester)]
    readable = {namespace}
    for grant in applied:
        readable.update(grant.namespaces)
    reasons = [f"own namespace {namespace}"] + [f"grant: {g.describe()}" for g in applied]
    if requester is None:
        reasons.append("no requester recorded (group grants do not apply)")
    if policy.error:
        reasons.append(policy.error)
    reason = "; ".join(reasons)
    if ALL_NAMESPACES in readable:
        return RunScope(cluster=True, namespaces=[], reason=reason)
    return RunScope(cluster=False, namespaces=sorted(readable), reason=reason)
