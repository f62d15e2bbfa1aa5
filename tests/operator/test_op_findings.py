"""The agent's own past findings: an Investigation about a workload that failed the same way
before asks `search_findings` (the product's tool, acting as the run's scope identity with the
chart's read rules) and cites the earlier run's root cause and fix; a finding of a namespace
outside the run's scope never reaches it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from opkit import create_inv, phase_is, wait_inv
from tenantkit import install_requester_policies, make_tenant, other_namespace, tenancy_setup, tenant_client

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP

EARLIER_CAUSE = "the JVM heap of web outgrew its 64Mi memory limit (OOMKilled, exit code 137)"
OTHER_CAUSE = "payroll OOMKilled because team B's batch job leaked memory"


@pytest.fixture
def tenancy(api_client: k8s.ApiClient, namespace: str, crds: None) -> Any:
    install_requester_policies(api_client, namespace)
    with tenancy_setup(api_client, namespace) as setup:
        yield setup


def _finished(
    api_client: k8s.ApiClient,
    namespace: str,
    name: str,
    *,
    subject: dict[str, str],
    cause: str,
    fix_call: dict[str, Any] | None = None,
) -> None:
    """An earlier run as the operator leaves one: finished, sections, the fix a person approved."""
    spec: dict[str, Any] = {"subject": subject}
    if fix_call:
        spec["decisions"] = {fix_call["id"]: {"approved": True}}
    create_inv(api_client, namespace, name, title=f"{subject['name']} keeps restarting", **spec)
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP,
        "v1alpha1",
        namespace,
        "investigations",
        name,
        {
            "status": {
                "phase": "Succeeded",
                "completionTime": "2026-11-20T10:00:00Z",
                "analysis": f"## Conclusions and Possible Root Causes\n{cause}",
                "sections": {"Conclusions and Possible Root Causes": cause},
                "toolCalls": [fix_call] if fix_call else [],
            }
        },
    )


def test_an_investigation_finds_and_cites_the_earlier_root_cause(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    tenancy: Any,
) -> None:
    fix = {
        "id": "fix-7",
        "name": "kubectl_set_resources",
        "status": "success",
        "description": "set memory limit of deployment web to 256Mi",
        "params": {},
    }
    _finished(
        api_client,
        namespace,
        "web-oom-last-week",
        subject={"kind": "Deployment", "name": "web"},
        cause=EARLIER_CAUSE,
        fix_call=fix,
    )
    tenant = make_tenant(cluster, api_client, namespace)
    with other_namespace(api_client, "unused") as other, tenant_client(cluster, namespace) as as_tenant:
        _finished(api_client, other, "payroll-oom", subject={"kind": "Deployment", "name": "web"}, cause=OTHER_CAUSE)
        model_server.add_scenario(
            Scenario(
                name=scenario_name,
                steps=[
                    Step(
                        tool_calls=[
                            ToolCall(
                                id="past-1",
                                name="search_findings",
                                arguments={"kind": "Deployment", "name": "web", "query": "OOMKilled memory"},
                            )
                        ]
                    ),
                    Step(
                        content="## Conclusions and Possible Root Causes\nThis happened before. "
                        "{{ tool_output('search_findings') }}"
                    ),
                ],
            )
        )
        start_operator(scenario_name, tools=None, **tenancy.settings())
        k8s.CustomObjectsApi(as_tenant).create_namespaced_custom_object(
            GROUP,
            "v1alpha1",
            namespace,
            "investigations",
            {
                "apiVersion": f"{GROUP}/v1alpha1",
                "kind": "Investigation",
                "metadata": {"name": "web-oom-again"},
                "spec": {"title": "web keeps restarting", "subject": {"kind": "Pod", "name": "web-5d9c7-x2x4k"}},
            },
        )
        done = wait_inv(api_client, namespace, "web-oom-again", phase_is("Succeeded", "Failed"), timeout=120)
        status = done["status"]
        assert status["phase"] == "Succeeded", status
        assert status["requester"]["username"] == tenant and status["scope"]["namespaces"] == [namespace]
        call = next(c for c in status["toolCalls"] if c["name"] == "search_findings")
        assert call["status"] == "success", call
        cause = status["sections"]["Conclusions and Possible Root Causes"]
        assert f"Investigation {namespace}/web-oom-last-week" in cause, cause  # cites the earlier run
        assert EARLIER_CAUSE in cause and "set memory limit of deployment web to 256Mi (success)" in cause
        assert OTHER_CAUSE not in cause and "payroll-oom" not in cause  # another namespace: out of scope
