"""Per-scope identities: the Kubernetes API, not the tools, keeps a run inside its scope.

A run whose scope is a set of namespaces acts as a ServiceAccount made for exactly that set:
`scope-<digest>` in the scopes namespace (the chart's `<release>-scopes`, which holds nothing
else), bound to the read-only ClusterRole by a RoleBinding in each namespace of the set, and
nowhere else. Cluster-scoped reads the chart allows (nodes, storage classes, ...) come from a
ClusterRoleBinding to the group of every account in the scopes namespace. A run with the
whole cluster in scope uses the cluster-wide tools account (`tools_identity.py`).

What the operator needs for this (the chart grants exactly that): create ServiceAccounts and
tokens in the scopes namespace, create RoleBindings, and `bind` on the read-only ClusterRole
alone — so it can hand out nothing but read access that is never Secrets.

Accounts and bindings are kept (one per distinct scope, reused by every run with that scope)
while runs use them: every use stamps the account's `lestrade.dev/last-used` annotation (at most
once per tenth of the idle time, so a burst of runs does not write it each time), and
`collect_unused` deletes an account and its RoleBindings once nobody has used it for `idle`
seconds (the next run of that scope makes it again). Tokens are short-lived and minted per
process.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from datetime import UTC, datetime

from kubernetes import client as k8s

from lestrade.operator.tenancy.tools_identity import ToolsIdentity
from lestrade.resources.keys import LAST_USED_ANNOTATION
from lestrade.resources.keys import SCOPE_NAMESPACES_ANNOTATION as NAMESPACES_ANNOTATION
from lestrade.resources.keys import TOOLS_SCOPE_LABEL as SCOPE_LABEL
from lestrade.resources.tenancy import RunScope

__all__ = ["ScopeIdentities", "scope_account_name", "SCOPE_LABEL"]

logger = logging.getLogger(__name__)

DEFAULT_IDLE = 24 * 3600.0
"""Seconds without a run before a scope's account goes: far longer than a run (whose tools hold
a token of the account for up to its timeout) so none loses its identity mid-run."""


def scope_account_name(namespaces: list[str]) -> str:
    digest = hashlib.sha256(",".join(sorted(set(namespaces))).encode()).hexdigest()[:16]
    return f"scope-{digest}"


class ScopeIdentities:
    """Mints (and caches) the identity of each scope, with the operator's client."""

    def __init__(
        self,
        operator: k8s.ApiClient,
        scopes_namespace: str,
        read_role: str,
        cluster: ToolsIdentity | None,
        *,
        idle: float = DEFAULT_IDLE,
    ) -> None:
        self.operator = operator
        self.scopes_namespace = scopes_namespace
        self.read_role = read_role
        self.cluster = cluster
        self._core = k8s.CoreV1Api(operator)
        self._rbac = k8s.RbacAuthorizationV1Api(operator)
        self._lock = threading.Lock()
        self._scope_locks: dict[str, threading.Lock] = {}
        self._identities: dict[str, ToolsIdentity] = {}
        self._incomplete: set[str] = set()
        """Scopes with a namespace that did not exist yet: their bindings are tried again."""
        self.idle = idle
        self._stamped: dict[str, float] = {}
        """Scope -> monotonic time its account's last-used annotation was last written."""

    def for_scope(self, scope: RunScope) -> ToolsIdentity | None:
        """The identity the run's tools use; None only for a cluster scope without a tools account.

        Made once per process and scope: the first run of a scope creates it under that
        scope's lock while the others wait (runs of other scopes do not)."""
        if scope.cluster:
            if self.cluster is not None:
                self.cluster.refresh()
            return self.cluster
        name = scope_account_name(scope.namespaces)
        try:
            return self._for_scope(name, scope)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            # Collected by another replica since this one cached it: made again.
            with self._lock:
                identity = self._identities.pop(name, None)
                self._stamped.pop(name, None)
            if identity is not None:
                identity.close()
            return self._for_scope(name, scope)

    def _for_scope(self, name: str, scope: RunScope) -> ToolsIdentity:
        with self._lock:
            scope_lock = self._scope_locks.setdefault(name, threading.Lock())
        with scope_lock:
            identity = self._identities.get(name)
            if identity is None or name in self._incomplete:
                # A namespace created since the last try gets its binding now.
                complete = self._ensure(name, scope.namespaces)
                if identity is None:
                    identity = ToolsIdentity(self.operator, self.scopes_namespace, name)
                    self._identities[name] = identity
                (self._incomplete.discard if complete else self._incomplete.add)(name)
            self._stamp(name)
        identity.refresh()
        return identity

    def _stamp(self, name: str) -> None:
        """Marks the account used now (what `collect_unused` goes by), throttled."""
        now = time.monotonic()
        if now - self._stamped.get(name, float("-inf")) < self.idle / 10:
            return
        patch = {"metadata": {"annotations": {LAST_USED_ANNOTATION: _now()}}}
        self._core.patch_namespaced_service_account(name, self.scopes_namespace, patch)
        self._stamped[name] = now

    def collect_unused(self) -> list[str]:
        """Deletes the accounts (and their RoleBindings) no run used for `idle` seconds;
        returns their names. Each is deleted under its scope's lock, so a run of that scope
        either got it before (and stamped it) or makes it again after."""
        found = self._core.list_namespaced_service_account(self.scopes_namespace, label_selector=SCOPE_LABEL).items
        removed = []
        for account in found:
            name = account.metadata.name
            with self._lock:
                scope_lock = self._scope_locks.setdefault(name, threading.Lock())
            with scope_lock:
                try:
                    current = self._core.read_namespaced_service_account(name, self.scopes_namespace)
                except k8s.ApiException as exc:
                    if exc.status == 404:
                        continue
                    raise
                annotations = current.metadata.annotations or {}
                used = _parse(annotations.get(LAST_USED_ANNOTATION)) or current.metadata.creation_timestamp
                if used is not None and (datetime.now(UTC) - used).total_seconds() < self.idle:
                    continue
                self._delete(name, current, annotations)
                removed.append(name)
        return removed

    def _delete(self, name: str, account: k8s.V1ServiceAccount, annotations: dict[str, str]) -> None:
        for namespace in filter(None, annotations.get(NAMESPACES_ANNOTATION, "").split(",")):
            _gone(self._rbac.delete_namespaced_role_binding, f"lestrade-{name}", namespace)
        # Only the account read above: one made again meanwhile is another object.
        _gone(
            self._core.delete_namespaced_service_account,
            name,
            self.scopes_namespace,
            body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=account.metadata.uid)),
        )
        identity = self._identities.pop(name, None)
        self._stamped.pop(name, None)
        if identity is not None:
            identity.close()
        logger.info("removed the unused tools identity %s/%s", self.scopes_namespace, name)

    def _ensure(self, name: str, namespaces: list[str]) -> bool:
        """Creates the account and its bindings; False when a namespace does not exist yet."""
        labels = {SCOPE_LABEL: name, "app.kubernetes.io/managed-by": "lestrade-operator"}
        account = k8s.V1ServiceAccount(
            metadata=k8s.V1ObjectMeta(
                name=name,
                labels=labels,
                annotations={NAMESPACES_ANNOTATION: ",".join(sorted(namespaces)), LAST_USED_ANNOTATION: _now()},
            ),
            automount_service_account_token=False,
        )
        _created(self._core.create_namespaced_service_account, self.scopes_namespace, account)
        complete = True
        for namespace in namespaces:
            binding = k8s.V1RoleBinding(
                metadata=k8s.V1ObjectMeta(name=f"lestrade-{name}", labels=labels),
                role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=self.read_role),
                subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=name, namespace=self.scopes_namespace)],
            )
            try:
                _created(self._rbac.create_namespaced_role_binding, namespace, binding)
            except k8s.ApiException as exc:
                if exc.status != 404:  # a namespace that does not exist: nothing to read there
                    raise
                complete = False
        logger.info("tools identity %s/%s reads %s", self.scopes_namespace, name, ", ".join(namespaces))
        return complete

    def close(self) -> None:
        with self._lock:
            identities, self._identities = list(self._identities.values()), {}
        for identity in identities:
            identity.close()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: str | None) -> datetime | None:
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if value else None
    except ValueError:
        return None


def _gone(delete, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
    try:
        delete(*args, **kwargs)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise


def _created(create, *args) -> None:  # type: ignore[no-untyped-def]
    try:
        create(*args)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
