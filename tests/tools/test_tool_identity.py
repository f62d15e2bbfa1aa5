"""Least privilege by construction: the tools act as a read-only ServiceAccount, and a tool
process cannot reach the operator's credentials (token, kubeconfig, model keys, /proc) however
it tries. Real apiserver, real processes, the Landlock sandbox the bash tool uses."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from lestrade.localcluster import binary_path
from lestrade.localcluster.toolsaccount import ensure_tools_account
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.context import default_tools
from lestrade.operator.tenancy.tools_identity import ToolsIdentity
from lestrade.operator.tools.bash import sandbox as sandbox_module
from lestrade.operator.tools.bash.parse import parse_command
from lestrade.operator.tools.bash.tool import bash_toolset, confined_runner

MODEL_KEY = "sk-live-0123456789abcdefFAKEKEY"
OPERATOR_TOKEN = "eyJhbGciOiJSUzI1NiJ9.operator-token-never-readable"


@pytest.fixture
def tools_account(api_client, namespace) -> Iterator[str]:
    account = ensure_tools_account(api_client, namespace)
    yield account
    name = f"lestrade-tools-read-{namespace}-lestrade-tools"
    k8s.RbacAuthorizationV1Api(api_client).delete_cluster_role_binding(name)


@pytest.fixture
def identity(api_client, tools_account) -> Iterator[ToolsIdentity]:
    namespace, name = tools_account.split("/")
    tools = ToolsIdentity(api_client, namespace, name)
    yield tools
    tools.close()


@pytest.fixture
def operator_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster) -> dict[str, Path]:
    """What an operator process holds: model keys in its env and a file, a mounted token, its
    (admin) kubeconfig, in-cluster service variables."""
    models = tmp_path / "etc-lestrade" / "modelList.yaml"
    models.parent.mkdir()
    models.write_text(f"gpt:\n  model: openai/gpt-4.1\n  api_key: {MODEL_KEY}\n")
    token = tmp_path / "serviceaccount" / "token"
    token.parent.mkdir()
    token.write_text(OPERATOR_TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", MODEL_KEY)
    monkeypatch.setenv("LESTRADE_MODEL_LIST", str(models))
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", cluster.server.rsplit(":", 1)[1])
    kubectl_dir = str(binary_path("kubectl").parent)
    monkeypatch.setenv("PATH", f"{kubectl_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return {"models": models, "token": token, "admin": Path(cluster.kubeconfig)}


def _can(
    api_client,
    user: str,
    verb: str,
    resource: str,
    *,
    namespace: str | None = None,
    group: str = "",
    subresource: str | None = None,
) -> bool:
    review = k8s.AuthorizationV1Api(api_client).create_subject_access_review(
        k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=user,
                groups=["system:serviceaccounts", "system:authenticated"],
                resource_attributes=k8s.V1ResourceAttributes(
                    verb=verb, resource=resource, group=group, namespace=namespace, subresource=subresource
                ),
            )
        )
    )
    return bool(review.status.allowed)


def test_the_tools_identity_reads_and_can_do_nothing_else(api_client, identity, namespace) -> None:
    user = identity.username
    assert user == f"system:serviceaccount:{namespace}:lestrade-tools"
    for ns in (namespace, "kube-system", None):
        assert _can(api_client, user, "list", "pods", namespace=ns)
        assert _can(api_client, user, "get", "pods", namespace=ns, subresource="log")
        for verb in ("get", "list", "watch"):
            assert not _can(api_client, user, verb, "secrets", namespace=ns)
        for verb in ("create", "update", "patch", "delete", "deletecollection"):
            for resource, group in (
                ("pods", ""),
                ("configmaps", ""),
                ("deployments", "apps"),
                ("investigations", "lestrade.dev"),
                ("clusterrolebindings", "rbac.authorization.k8s.io"),
            ):
                assert not _can(api_client, user, verb, resource, namespace=ns, group=group), (verb, resource)
        assert not _can(api_client, user, "create", "pods", namespace=ns, subresource="exec")
        assert not _can(api_client, user, "create", "serviceaccounts", namespace=ns, subresource="token")
    assert not _can(api_client, user, "impersonate", "users")
    assert not _can(api_client, user, "impersonate", "serviceaccounts", namespace=namespace)


def test_the_tools_client_is_the_tools_identity(identity, namespace) -> None:
    review = k8s.AuthenticationV1Api(identity.api_client).create_self_subject_review(k8s.V1SelfSubjectReview())
    assert review.status.user_info.username == identity.username
    core = k8s.CoreV1Api(identity.api_client)
    assert core.list_namespaced_pod(namespace).items == []
    with pytest.raises(k8s.ApiException) as denied:
        core.list_namespaced_secret(namespace)
    assert denied.value.status == 403


async def test_the_operators_tool_factory_gives_the_tools_that_identity(
    api_client, tools_account, operator_secrets, namespace
) -> None:
    settings = OperatorSettings.from_env({"LESTRADE_TOOLS_SERVICE_ACCOUNT": tools_account})
    registry = default_tools(settings)(api_client)
    bash = registry.get("bash")
    out = await bash.run({"command": "kubectl auth whoami -o json"})
    assert json.loads(out.text())["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{namespace}:lestrade-tools"
    )
    out = await registry.get("kubectl_get_by_kind_in_namespace").run({"kind": "pods", "namespace": namespace})
    assert out.status in ("success", "no_data"), out.text()


async def test_a_tool_process_cannot_read_the_operators_credentials(
    identity, operator_secrets, cluster, namespace
) -> None:
    runner = confined_runner(kubeconfig=identity.kubeconfig, cwd=str(identity.workdir), timeout=30)
    assert runner is not None

    async def run(command: str) -> str:
        return (await runner.run(parse_command(command))).output

    env = dict(line.split("=", 1) for line in (await run("env")).splitlines() if "=" in line)
    assert MODEL_KEY not in str(env)
    assert not [k for k in env if k.startswith("KUBERNETES_")]
    assert env["KUBECONFIG"] == str(identity.kubeconfig)
    assert env["HOME"] == str(identity.workdir)

    admin_text = operator_secrets["admin"].read_text()
    for path in (
        operator_secrets["admin"],
        operator_secrets["models"],
        operator_secrets["token"],
        f"/proc/{os.getpid()}/environ",
        f"/proc/{os.getppid()}/environ",
        "/proc/self/environ",
        f"/proc/{os.getpid()}/cmdline",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
    ):
        out = await run(f"cat {path}")
        assert MODEL_KEY not in out and OPERATOR_TOKEN not in out and admin_text not in out
        assert "Permission denied" in out or "No such file" in out, (path, out)
    for folder in ("/proc", "/var/run", "/tmp", os.path.expanduser("~"), operator_secrets["token"].parent):
        assert "Permission denied" in await run(f"ls {folder}"), folder
    # Through a glob or a redirection (both resolved by the operator) nothing gets out either.
    assert OPERATOR_TOKEN not in await run(f"cat {operator_secrets['token'].parent}/*")
    with pytest.raises(Exception, match="outside what tool processes may read"):
        await run(f"cat < {operator_secrets['token']}")

    # kubectl acts as the tools identity, whatever it is told.
    assert "lestrade-tools" in await run("kubectl auth whoami")
    assert "Forbidden" in await run(f"kubectl get secrets -n {namespace}")
    assert "Forbidden" in await run("kubectl get secrets -A")
    via_admin = await run(f"kubectl --kubeconfig={operator_secrets['admin']} get secrets -A")
    assert "permission denied" in via_admin.lower() and "NAMESPACE" not in via_admin
    # ... and cannot signal the operator.
    assert "not permitted" in await run(f"kill -0 {os.getpid()}")


async def test_without_landlock_the_bash_tool_runs_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox_module, "landlock_abi", lambda: 0)
    marker = tmp_path / "ran"
    bash = bash_toolset(cwd=str(tmp_path)).tools[0]
    out = await bash.run({"command": f"touch {marker}"})
    assert out.status == "error" and "Landlock" in (out.error or "")
    assert not marker.exists()


async def test_a_tool_process_reaches_no_server_but_the_api_server(identity, operator_secrets) -> None:
    # A listener standing in for an attacker's server: the token must never arrive there.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    runner = confined_runner(kubeconfig=identity.kubeconfig, cwd=str(identity.workdir), timeout=30)
    assert runner is not None
    try:
        out = (
            await runner.run(
                parse_command(f"kubectl --server=https://127.0.0.1:{port} --insecure-skip-tls-verify get pods")
            )
        ).output
        assert "connect: permission denied" in out.lower(), out
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    finally:
        listener.close()
    # The API server itself stays reachable.
    assert "lestrade-tools" in (await runner.run(parse_command("kubectl auth whoami"))).output
