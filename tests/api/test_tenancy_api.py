"""Tenant isolation through the HTTP API: the API writes as the caller, so the caller — not the
API — is the recorded requester, and the caller's run reads only what the caller's scope
allows (real tokens, real RBAC, the real operator with the product's tools)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from convkit import get_conv
from kubernetes import client as k8s
from opkit import OperatorThread, model_list
from tenantkit import grant_kinds, install_requester_policies, other_namespace, tenancy_setup

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.resources import GROUP


@pytest.fixture
def tenancy(api_client: k8s.ApiClient, namespace: str, crds: None) -> Any:
    install_requester_policies(api_client, namespace)
    with tenancy_setup(api_client, namespace) as setup:
        yield setup


def test_an_http_caller_reads_only_its_scope_and_is_recorded_as_the_requester(
    stack: Any,
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tenancy: Any,
) -> None:
    fact = f"green-quay-{uuid.uuid4().hex[:6]}"
    grant_kinds(
        api_client,
        namespace,
        "caller",
        [("investigations", ["create", "get"]), ("conversations", ["create", "get", "patch"])],
    )
    caller = f"system:serviceaccount:{namespace}:caller"
    headers = {"Authorization": f"Bearer {cluster.token_for(namespace, 'caller')}"}
    with other_namespace(api_client, fact) as other:
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
                    Step(content="The tool said: {{ tool_output('kubectl_describe') }}"),
                ],
            )
        )
        s = stack(scenario_name, auth=True, operator=False)
        op = OperatorThread(
            cluster, namespace, model_list(model_server, scenario_name), tools=None, **tenancy.settings()
        )
        op.start()
        try:
            with s.client() as http:
                wait_until("RBAC to allow", lambda: http.get("/api/model", headers=headers).status_code == 200, 30)
                answer = http.post("/api/chat", headers=headers, json={"ask": f"What is payroll in {other} doing?"})
                assert answer.status_code == 200, answer.text
                body = answer.json()
                assert fact not in answer.text
                assert "forbidden" in body["analysis"].lower() and other in body["analysis"], body["analysis"]
                conv = get_conv(api_client, namespace, body["conversation_id"])
                assert conv["status"]["requester"]["username"] == caller
                assert conv["status"]["scope"]["namespaces"] == [namespace]

                # Granted by the admin (the caller's group), the same ask over HTTP reads it.
                tenancy.grant([{"groups": [f"system:serviceaccounts:{namespace}"], "namespaces": [other]}])
                granted = http.post(
                    "/api/investigate",
                    headers=headers,
                    json={
                        "title": f"payroll in {other}",
                        "description": "",
                        "source": "test",
                        "subject": {},
                        "context": {},
                    },
                )
                assert granted.status_code == 200, granted.text
                assert fact in granted.json()["analysis"], granted.text
                name = granted.json()["investigation"]
                inv = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
                    GROUP, "v1alpha1", namespace, "investigations", name
                )
                assert inv["status"]["requester"]["username"] == caller
                assert inv["status"]["scope"]["namespaces"] == sorted([namespace, other])
        finally:
            op.stop()
