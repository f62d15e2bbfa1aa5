"""Identities are made once per process and scope, however many runs ask at the same moment.

After a restart every resumed run asks for its tools' identity from a worker thread at once;
each identity must be created by one of them (one token request, one private folder) and handed
to all. A failed set-up leaves no folder behind. Real apiserver (TokenRequest, RBAC).
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.toolsaccount import ensure_tools_account
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.context import ScopedTools
from lestrade.operator.tenancy.scope_identity import LAST_USED_ANNOTATION
from lestrade.operator.tenancy.tools_identity import ToolsIdentity
from lestrade.resources.tenancy import RunScope

THREADS = 8


@pytest.fixture
def tools_account(api_client: k8s.ApiClient, namespace: str) -> Iterator[str]:
    account = ensure_tools_account(api_client, namespace)
    yield account
    k8s.RbacAuthorizationV1Api(api_client).delete_cluster_role_binding(
        f"lestrade-tools-read-{namespace}-lestrade-tools"
    )


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Identity folders are made here, so the test counts only its own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _all_at_once(call: Callable[[], Any]) -> list[Any]:
    barrier = threading.Barrier(THREADS)
    results: list[Any] = [None] * THREADS

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = call()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def _minted(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("minted a token")]


def test_the_tools_identity_is_made_once_for_many_threads(
    api_client: k8s.ApiClient,
    tools_account: str,
    private_tmp: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lestrade.operator.tenancy.tools_identity")
    tools = ScopedTools(OperatorSettings.from_env({"LESTRADE_TOOLS_SERVICE_ACCOUNT": tools_account}))
    try:
        identities = _all_at_once(lambda: tools.identity(api_client, None))
        assert len({id(i) for i in identities}) == 1 and identities[0] is not None
        assert len(list(private_tmp.glob("lestrade-tools-id-*"))) == 1
        assert len(_minted(caplog)) == 1
    finally:
        tools.close()
    assert list(private_tmp.glob("lestrade-tools-id-*")) == []


def test_a_scopes_identity_is_made_once_and_other_scopes_get_their_own(
    api_client: k8s.ApiClient,
    namespace: str,
    private_tmp: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lestrade.operator.tenancy.tools_identity")
    tools = ScopedTools(OperatorSettings.from_env({"LESTRADE_SCOPES_NAMESPACE": namespace}))
    one, two = RunScope(namespaces=[namespace]), RunScope(namespaces=[namespace, "default"])
    try:
        identities = _all_at_once(lambda: tools.identity(api_client, one))
        assert len({id(i) for i in identities}) == 1
        other = tools.identity(api_client, two)
        assert other is not identities[0] and other.service_account != identities[0].service_account
        assert tools.identity(api_client, one) is identities[0]
        assert len(list(private_tmp.glob("lestrade-tools-id-*"))) == 2
        assert len(_minted(caplog)) == 2
    finally:
        tools.close()
    assert list(private_tmp.glob("lestrade-tools-id-*")) == []


def test_an_identity_that_cannot_be_made_leaves_no_folder(
    api_client: k8s.ApiClient,
    namespace: str,
    private_tmp: Path,
) -> None:
    with pytest.raises(k8s.ApiException) as missing:
        ToolsIdentity(api_client, namespace, "no-such-account")
    assert missing.value.status == 404
    assert list(private_tmp.glob("lestrade-tools-id-*")) == []


def test_a_scope_identity_nobody_used_for_its_idle_time_is_collected_and_made_again_when_needed(
    api_client: k8s.ApiClient,
    namespace: str,
    private_tmp: Path,
) -> None:
    tools = ScopedTools(OperatorSettings.from_env({"LESTRADE_SCOPES_NAMESPACE": namespace}))
    core, rbac = k8s.CoreV1Api(api_client), k8s.RbacAuthorizationV1Api(api_client)
    scope = RunScope(namespaces=[namespace])
    try:
        identity = tools.identity(api_client, scope)
        name = identity.service_account
        binding = f"lestrade-{name}"
        assert rbac.read_namespaced_role_binding(binding, namespace).subjects[0].name == name
        assert tools.collect_unused(api_client) == []  # just used: kept

        core.patch_namespaced_service_account(
            name, namespace, {"metadata": {"annotations": {LAST_USED_ANNOTATION: "2020-01-01T00:00:00Z"}}}
        )  # as if its last run was long ago
        assert tools.collect_unused(api_client) == [name]
        for read in (
            lambda: core.read_namespaced_service_account(name, namespace),
            lambda: rbac.read_namespaced_role_binding(binding, namespace),
        ):
            with pytest.raises(k8s.ApiException) as gone:
                read()
            assert gone.value.status == 404
        assert list(private_tmp.glob("lestrade-tools-id-*")) == []

        again = tools.identity(api_client, scope)  # the next run of the scope makes it again
        assert again is not identity and again.service_account == name
        assert core.read_namespaced_service_account(name, namespace).metadata.annotations[LAST_USED_ANNOTATION] > "2020"
        assert rbac.read_namespaced_role_binding(binding, namespace).subjects[0].name == name
    finally:
        tools.close()
