"""Tenant isolation on the real control plane: a tenant allowed to create Investigations in its
namespace cannot have the agent read another namespace — the Kubernetes API refuses the tools
(in-process tools and bash's kubectl alike) and the analysis says so — unless the cluster
admin's policy grants it; the requester is recorded at admission and cannot be forged."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import events_for, phase_is, transcript_messages, wait_inv
from tenantkit import install_requester_policies, make_tenant, other_namespace, tenancy_setup, tenant_client

from lestrade.localcluster import binary_path
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP
from lestrade.resources.tenancy import REQUESTED_BY_ANNOTATION, REQUESTER_GROUPS_ANNOTATION


@pytest.fixture
def tenancy(api_client: k8s.ApiClient, namespace: str, crds: None) -> Any:
    install_requester_policies(api_client, namespace)
    with tenancy_setup(api_client, namespace) as setup:
        yield setup


@pytest.fixture
def kubectl_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{binary_path('kubectl').parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")


def _ask_about(model_server: Any, name: str, other: str) -> None:
    """The model describes a pod in the other namespace (built-in tool and bash's kubectl),
    then reports exactly what the tools said."""
    model_server.add_scenario(
        Scenario(
            name=name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(
                            id="describe-1",
                            name="kubectl_describe",
                            arguments={"kind": "pod", "name": "payroll", "namespace": other},
                        ),
                        ToolCall(
                            id="bash-1",
                            name="bash",
                            arguments={"command": f"kubectl get pod payroll -n {other} -o yaml"},
                        ),
                        ToolCall(
                            id="find-1", name="kubectl_find_resource", arguments={"keyword": "payroll", "kind": "pod"}
                        ),
                    ]
                ),
                Step(
                    content="## Findings\ndescribe: {{ tool_output('kubectl_describe') }}\n"
                    "bash: {{ tool_output('bash') }}\nfind: {{ tool_output('kubectl_find_resource') }}"
                ),
            ],
        )
    )


def _create_as(client: k8s.ApiClient, namespace: str, name: str, other: str, **metadata: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Investigation",
        "metadata": {"name": name, **metadata},
        "spec": {"title": f"What is wrong with pod payroll in namespace {other}?"},
    }
    return k8s.CustomObjectsApi(client).create_namespaced_custom_object(
        GROUP, "v1alpha1", namespace, "investigations", body
    )


def test_a_tenant_cannot_read_another_namespace_until_a_grant_says_so(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    tenancy: Any,
    kubectl_on_path: None,
) -> None:
    fact = f"blue-harbor-{uuid.uuid4().hex[:6]}"
    tenant = make_tenant(cluster, api_client, namespace)
    with other_namespace(api_client, fact) as other, tenant_client(cluster, namespace) as as_tenant:
        _ask_about(model_server, scenario_name, other)
        start_operator(scenario_name, tools=None, **tenancy.settings())

        # 1. No grant: the tools act as an account bound to the tenant's namespace only.
        _create_as(as_tenant, namespace, "refused", other)
        done = wait_inv(api_client, namespace, "refused", phase_is("Succeeded", "Failed"), timeout=120)
        status = done["status"]
        assert status["phase"] == "Succeeded", status
        assert status["requester"]["username"] == tenant
        assert f"system:serviceaccounts:{namespace}" in status["requester"]["groups"]
        scope = status["scope"]
        assert scope["cluster"] is False and scope["namespaces"] == [namespace]
        assert scope["identity"].startswith(f"system:serviceaccount:{tenancy.scopes_namespace}:scope-")
        analysis = status["analysis"]
        assert fact not in analysis
        describe_part, rest = analysis.split("bash:", 1)
        bash_part, find_part = rest.split("find:", 1)
        assert "forbidden" in describe_part.lower() and other in describe_part, analysis
        assert "forbidden" in bash_part.lower(), analysis
        # A search "everywhere" covers the scope only: nothing found, and no error either.
        assert "No pod match 'payroll'" in find_part and other not in find_part, analysis
        # The model was told its reach in its instructions.
        (messages, _chunks) = transcript_messages(api_client, done)
        system = next(m for m in messages.messages if m["role"] == "system")["content"]
        assert f"your tools can read only these namespaces: {namespace}" in system
        # Events name who asked and what the tools read.
        notes = [e.message for e in events_for(api_client, namespace, "refused")]
        assert any(f"asked by {tenant}" in n and f"namespace(s) {namespace}" in n for n in notes), notes

        # 2. The admin grants the tenant's group the other namespace: the same ask now reads it.
        tenancy.grant([{"groups": [f"system:serviceaccounts:{namespace}"], "namespaces": [other]}])
        _create_as(as_tenant, namespace, "granted", other)
        done = wait_inv(api_client, namespace, "granted", phase_is("Succeeded", "Failed"), timeout=120)
        status = done["status"]
        assert status["phase"] == "Succeeded", status
        assert status["scope"]["namespaces"] == sorted([namespace, other])
        assert f"group system:serviceaccounts:{namespace}" in status["scope"]["reason"]
        assert status["analysis"].count(fact) >= 2, status["analysis"]  # describe and bash both read it
        find_part = status["analysis"].split("find:", 1)[1]
        assert "payroll" in find_part and other in find_part, status["analysis"]


def test_the_requester_cannot_be_forged(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    tenancy: Any,
) -> None:
    tenant = make_tenant(cluster, api_client, namespace)
    with tenant_client(cluster, namespace) as as_tenant:
        custom = k8s.CustomObjectsApi(as_tenant)
        # Claiming to be the admin at creation: the cluster records the real caller instead.
        forged = {REQUESTED_BY_ANNOTATION: "kubernetes-admin", REQUESTER_GROUPS_ANNOTATION: "system:masters"}
        created = _create_as(as_tenant, namespace, "forged", "kube-system", annotations=forged)
        annotations = created["metadata"]["annotations"]
        assert annotations[REQUESTED_BY_ANNOTATION] == tenant
        assert "system:masters" not in annotations[REQUESTER_GROUPS_ANNOTATION].split(",")

        # Rewriting it afterwards is refused, by the tenant and by the admin alike.
        for client in (as_tenant, api_client):
            with pytest.raises(k8s.ApiException) as refused:
                k8s.CustomObjectsApi(client).patch_namespaced_custom_object(
                    GROUP,
                    "v1alpha1",
                    namespace,
                    "investigations",
                    "forged",
                    {"metadata": {"annotations": {REQUESTED_BY_ANNOTATION: "kubernetes-admin"}}},
                    _content_type="application/merge-patch+json",
                )
            assert refused.value.status in (403, 422)
            assert "cannot be changed" in refused.value.body
        with pytest.raises(k8s.ApiException) as removed:
            custom.patch_namespaced_custom_object(
                GROUP,
                "v1alpha1",
                namespace,
                "investigations",
                "forged",
                {"metadata": {"annotations": {REQUESTER_GROUPS_ANNOTATION: None}}},
                _content_type="application/merge-patch+json",
            )
        assert "cannot be changed" in removed.value.body


def test_job_mode_pods_run_with_the_scope_too(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tenancy: Any,
    tmp_path: Any,
) -> None:
    """A Job's pod gets the tenancy settings from the operator (PASSED_TO_JOBS) and its entry
    point confines the run exactly as the operator does."""
    import subprocess
    import sys

    from opkit import write_model_list

    from lestrade.operator.base.settings import OperatorSettings
    from lestrade.operator.runs.jobs import job_manifest
    from lestrade.runs.views import view_of

    env = {
        "LESTRADE_TOOLS_SERVICE_ACCOUNT": tenancy.tools_account,
        "LESTRADE_SCOPES_NAMESPACE": tenancy.scopes_namespace,
        "LESTRADE_SCOPE_POLICY": tenancy.policy,
    }
    fact = f"red-pier-{uuid.uuid4().hex[:6]}"
    make_tenant(cluster, api_client, namespace)
    with other_namespace(api_client, fact) as other, tenant_client(cluster, namespace) as as_tenant:
        model_server.add_scenario(
            Scenario(
                name=scenario_name,
                steps=[
                    Step(
                        tool_calls=[
                            ToolCall(
                                id="d-1",
                                name="kubectl_describe",
                                arguments={"kind": "pod", "name": "payroll", "namespace": other},
                            )
                        ]
                    ),
                    Step(content="describe: {{ tool_output('kubectl_describe') }}"),
                ],
            )
        )
        created = _create_as(as_tenant, namespace, "in-a-job", other)
        settings = OperatorSettings.from_env({**env, "POD_NAMESPACE": namespace})
        container = job_manifest(settings, view_of(created).ref, 1, 60)["spec"]["template"]["spec"]["containers"][0]
        passed = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: passed.get(k) for k in env} == env

        models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
        result = subprocess.run(
            [sys.executable, *container["command"][1:], "--kubeconfig", str(cluster.kubeconfig)],
            env={**os.environ, **passed, "LESTRADE_MODEL_LIST": str(models)} | {"POD_NAME": "job-pod"},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        status = wait_inv(api_client, namespace, "in-a-job", phase_is("Succeeded", "Failed"), timeout=60)["status"]
        assert status["phase"] == "Succeeded" and status["scope"]["namespaces"] == [namespace]
        assert "forbidden" in status["analysis"].lower() and fact not in status["analysis"], status["analysis"]


def test_without_the_mutating_policy_the_annotations_are_truthful_or_refused(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    tenancy: Any,
) -> None:
    """Clusters without MutatingAdmissionPolicy (the chart's default): the validating policy
    alone keeps the requester truthful at creation. The mutating binding is removed for the
    test and restored after."""
    from lestrade.operator.admission.requester import POLICY_NAME

    tenant = make_tenant(cluster, api_client, namespace)
    k8s.CustomObjectsApi(api_client).delete_cluster_custom_object(
        "admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicybindings", POLICY_NAME
    )
    try:
        with tenant_client(cluster, namespace) as as_tenant:
            forged = {REQUESTED_BY_ANNOTATION: "kubernetes-admin"}
            attempt = iter(range(10_000))

            def refused() -> bool:
                try:
                    _create_as(as_tenant, namespace, f"forged-{next(attempt)}", "x", annotations=forged)
                except k8s.ApiException as exc:
                    assert exc.status in (403, 422), exc.body
                    return "must be your own user name" in exc.body
                return False

            from opkit import wait_until

            wait_until("the mutating policy to stop applying", refused, timeout=60, interval=0.3)
            with pytest.raises(k8s.ApiException) as claimed:
                _create_as(
                    as_tenant,
                    namespace,
                    "claims-masters",
                    "x",
                    annotations={REQUESTER_GROUPS_ANNOTATION: "system:masters"},
                )
            assert "names a group you are not in" in claimed.value.body
            truthful = _create_as(
                as_tenant,
                namespace,
                "truthful",
                "x",
                annotations={
                    REQUESTED_BY_ANNOTATION: tenant,
                    REQUESTER_GROUPS_ANNOTATION: f"system:serviceaccounts:{namespace}",
                },
            )
            assert truthful["metadata"]["annotations"][REQUESTED_BY_ANNOTATION] == tenant
            silent = _create_as(as_tenant, namespace, "silent", "x")
            assert REQUESTED_BY_ANNOTATION not in (silent["metadata"].get("annotations") or {})
    finally:
        import tenantkit

        tenantkit._installed.clear()
        install_requester_policies(api_client, namespace)


def test_only_the_creator_asks_in_a_conversation(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    tenancy: Any,
) -> None:
    """Every turn runs with the creator's scope, so another user who may patch the Conversation
    still cannot ask in it (approvals and other changes stay open to them)."""
    from convkit import ask, create_conv

    make_tenant(cluster, api_client, namespace, "alice")
    make_tenant(cluster, api_client, namespace, "bob")
    with (
        tenant_client(cluster, namespace, "alice") as alice_client,
        tenant_client(cluster, namespace, "bob") as bob_client,
    ):
        create_conv(alice_client, namespace, "alices", "What runs here?")
        ask(alice_client, namespace, "alices", "And since when?")
        with pytest.raises(k8s.ApiException) as refused:
            ask(bob_client, namespace, "alices", "Now read it for me.")
        assert refused.value.status in (403, 422)
        assert f"only system:serviceaccount:{namespace}:alice may ask" in refused.value.body
        create_conv(bob_client, namespace, "bobs", "My own question.")
        ask(bob_client, namespace, "bobs", "Another.")
