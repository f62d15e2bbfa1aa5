"""An alert all the way: examples/alertroute.yaml applied as GitOps would, Alertmanager's
webhook, the Investigation the route creates, the operator running it, the resolve recorded."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml
from alertkit import alert, payload, route_status, routed_investigations
from opkit import phase_is, wait_inv

from lestrade.localcluster.build import binary_path
from lestrade.modelserver import Scenario, Step
from lestrade.resources.rest import request_json

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "alertroute.yaml"
ANSWER = "# Cause\nThe config file /etc/app.yaml is missing.\n\n# Fix\nMount the ConfigMap."


def test_the_example_route_investigates_a_crashlooping_pod(
    stack: Any, cluster: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    applied = subprocess.run(
        [
            str(binary_path("kubectl")),
            f"--kubeconfig={cluster.kubeconfig}",
            "apply",
            "--server-side",
            "-n",
            namespace,
            "-f",
            str(EXAMPLE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert applied.returncode == 0, applied.stderr
    route = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER)]))
    s = stack(scenario_name)
    firing = [
        alert(1, namespace),
        alert(2, namespace, severity="info"),
        alert(3, namespace, alertname="KubeJobFailed"),
        alert(4, "other-team"),
    ]
    response = httpx.post(f"{s.base}/api/alertmanager", json=payload(firing), timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["matched"], body["created"]) == (1, 1), body
    (name,) = body["routes"][0]["created"]
    assert set(routed_investigations(api_client, namespace, route)) == {name}

    done = wait_inv(api_client, namespace, name, phase_is("Succeeded", "Failed"), timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    spec = done["spec"]
    assert spec["title"] == f"KubePodCrashLooping on {namespace}/web-1"
    assert spec["description"] == "Pod web-1 is restarting"
    assert spec["question"].startswith("Why does container app of pod web-1 keep restarting")
    assert spec["enableToolApproval"] is False and spec["timeout"] == "10m"
    assert done["status"]["sections"]["Fix"] == "Mount the ConfigMap."

    resolved = [{**alert(1, namespace), "status": "resolved", "endsAt": "2026-11-23T05:00:00Z"}]
    again = httpx.post(f"{s.base}/api/alertmanager", json=payload(resolved, "resolved"), timeout=60)
    assert again.status_code == 200 and again.json()["resolved"] == 1, again.text
    after = routed_investigations(api_client, namespace, route)[name]
    assert after["metadata"]["annotations"]["lestrade.dev/alert-resolved-at"] == "2026-11-23T05:00:00Z"
    assert after["status"]["phase"] == "Succeeded"  # finished runs keep their result
    status = route_status(api_client, namespace, route)
    assert (status["matched"], status["created"], status["resolved"]) == (1, 1, 1)
    assert status["lastInvestigation"]["name"] == name


def test_a_resolved_alert_cancels_its_queued_investigation(
    stack: Any, cluster: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    from opkit import OperatorThread, model_list, test_registry, wait_until

    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER, latency_ms=120_000)]))
    # one run slot: the first alert's run holds it, the second waits in Pending
    op = OperatorThread(
        cluster, namespace, model_list(model_server, scenario_name), tools=test_registry, runs_concurrency=1
    )
    op.start()
    try:
        s = stack(scenario_name, operator=False)
        request_json(
            api_client,
            "POST",
            f"/apis/lestrade.dev/v1alpha1/namespaces/{namespace}/alertroutes",
            {
                "apiVersion": "lestrade.dev/v1alpha1",
                "kind": "AlertRoute",
                "metadata": {"name": "all"},
                "spec": {"investigation": {"title": "{{ labels.pod }}"}},
            },
        )
        response = httpx.post(f"{s.base}/api/alertmanager", json=payload([alert(1, namespace), alert(2, namespace)]))
        assert response.status_code == 200 and response.json()["created"] == 2, response.text

        def queued() -> dict[str, Any] | None:
            for item in routed_investigations(api_client, namespace, "all").values():
                reasons = [c.get("reason") for c in (item.get("status") or {}).get("conditions") or []]
                if "WaitingForSlot" in reasons:
                    return item
            return None

        wait_until("one Investigation queued", queued, 60)
        waiting = queued()
        assert waiting is not None
        index = int(waiting["spec"]["title"].split("-")[1])
        resolved = [{**alert(index, namespace), "status": "resolved", "endsAt": "2026-11-23T05:00:00Z"}]
        answer = httpx.post(f"{s.base}/api/alertmanager", json=payload(resolved, "resolved"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["routes"][0]["cancelled"] == [waiting["metadata"]["name"]]
        name = waiting["metadata"]["name"]
        # Cancelled, and the operator let go of it (no daemon, no finalizer): it can never start.
        done = wait_inv(
            api_client,
            namespace,
            name,
            lambda o: (o.get("status") or {}).get("phase") == "Failed" and not o["metadata"].get("finalizers"),
            timeout=60,
        )
        (cond,) = [c for c in done["status"]["conditions"] if c["type"] == "Succeeded"]
        assert cond["reason"] == "AlertResolved" and not done["status"].get("startTime")
    finally:
        op.stop()
