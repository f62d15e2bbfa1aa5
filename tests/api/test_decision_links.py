"""Generic webhooks decide through a signed link: the operator puts `decisionUrl` into the
webhook's `run.awaitingApproval` message, and a POST to it (no token: the link is the
credential) decides exactly the waiting calls of that run; a forged, edited or repeated link,
and a GET, decide nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from kubernetes import client as k8s

sys.path.insert(0, str(Path(__file__).parent.parent / "operator"))

from apikit import serve, wait_ready  # noqa: E402
from deliverykit import Receiver  # noqa: E402
from opkit import (  # noqa: E402
    EFFECT_LABEL,
    GROUP,
    VERSION,
    OperatorThread,
    count_effects,
    create_inv,
    get_inv,
    model_list,
    phase_is,
    test_registry,
    wait_inv,
    wait_until,
)

from lestrade.api.app import create_app  # noqa: E402
from lestrade.modelserver import Scenario, Step, ToolCall  # noqa: E402

KEY = b"decision-link-key-0123456789abcdef"
SCHEMA = json.loads((Path(__file__).parents[2] / "docs/schemas/delivery-v1.json").read_text())


def test_a_webhook_decides_through_its_signed_link(
    cluster: Any,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    api_client: k8s.ApiClient,
    tmp_path: Path,
) -> None:
    key_file = tmp_path / "decision-key"
    key_file.write_bytes(KEY)
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": scenario_name})
                    ]
                ),
                Step(content="Fixed."),
            ],
        )
    )
    models = model_list(model_server, scenario_name)
    with (
        Receiver() as hook,
        cluster.api_client() as client,
        serve(create_app(client, namespace=namespace, models=models, auth=True, api_keys={}, decision_key=KEY)) as base,
    ):
        wait_ready(base)
        k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "destinations",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Destination",
                "metadata": {"name": "hook"},
                "spec": {"type": "Webhook", "webhook": {"url": hook.url}},
            },
        )
        op = OperatorThread(
            cluster,
            namespace,
            models,
            tools=test_registry,
            delivery_api_url=base,
            delivery_decision_key_file=str(key_file),
        )
        op.start()
        try:
            create_inv(api_client, namespace, "fixme", deliver=[{"destination": "hook"}])
            (firing,) = wait_until("the approval message", hook.requests, timeout=120)
            payload = firing.json()
            jsonschema.validate(payload, SCHEMA)
            url = payload["decisionUrl"]
            assert url.startswith(f"{base}/api/delivery/decisions/")
            token = url.rsplit("/", 1)[1]
            body, _, mac = token.partition(".")
            forged = f"{base}/api/delivery/decisions/{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}.{mac}"
            with httpx.Client(timeout=60) as http:
                assert http.get(url).status_code == 405  # a link preview decides nothing
                refused = http.post(forged, json={"approved": True})
                assert refused.status_code == 403 and "signature" in refused.json()["detail"]
                assert http.post(url, json={"approved": "maybe"}).status_code == 422
                assert not get_inv(api_client, namespace, "fixme")["spec"].get("decisions")
                assert count_effects(api_client, namespace, EFFECT_LABEL, scenario_name) == 0
                accepted = http.post(url, json={"approved": True, "by": "alice in #ops"})
                assert accepted.status_code == 200, accepted.text
                assert http.post(url, json={"approved": False}).status_code == 409  # spent
            done = wait_inv(api_client, namespace, "fixme", phase_is("Succeeded"), timeout=120)
            decision = done["spec"]["decisions"]["fix-1"]
            assert decision["approved"] is True and decision["digest"] == payload["pendingApprovals"][0]["digest"]
            assert "signed decision link" in decision["reason"] and "alice in #ops" in decision["reason"]
            assert count_effects(api_client, namespace, EFFECT_LABEL, scenario_name) == 1
            resolved = wait_until(
                "the end message", lambda: len(hook.requests()) == 2 and hook.requests()[1], timeout=120
            )
            assert resolved.json()["status"] == "resolved" and "decisionUrl" not in resolved.json()
        finally:
            op.stop()
