"""The console's HTTP side without a browser: the pages are public and locked down by a
Content-Security-Policy, their data is not; bad input is refused naming the field; decisions
only for calls that wait, and bound to the digest of the call that waited."""

from __future__ import annotations

from typing import Any

from opkit import get_inv, phase_is, wait_inv

from lestrade.modelserver import Scenario, Step, ToolCall


def test_pages_data_and_bad_input(
    stack: Any, model_server: Any, scenario_name: str, namespace: str, api_client: Any
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[
                        ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": scenario_name})
                    ]
                ),
                Step(content="done"),
            ],
        )
    )
    s = stack(scenario_name, auth=True, operator=False)
    with s.client() as http:
        page = http.get("/")
        assert page.status_code == 200 and '<script type="module" src="/console/app.js">' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert http.get("/console/app.js").headers["content-type"].startswith("text/javascript")
        assert http.get("/console/..%2Fauth.py").status_code == 404
        assert http.get("/console/auth.py").status_code == 404
        assert http.get("/api/console/runs").status_code == 401  # the data needs a token

    s = stack(scenario_name)  # authentication off: the API's own identity
    with s.client() as http:
        created = http.post("/api/console/investigations", json={"title": "web-1", "namespace": namespace})
        assert created.status_code == 200, created.text
        name = created.json()["name"]
        paused = wait_inv(api_client, namespace, name, phase_is("AwaitingApproval", "Failed"))
        assert paused["status"]["phase"] == "AwaitingApproval"

        bad_ns = http.post("/api/console/investigations", json={"title": "x", "namespace": "../etc"})
        assert bad_ns.status_code == 422 and bad_ns.json()["detail"][0]["loc"] == ["body", "namespace"]
        assert http.get(f"/api/console/runs/pods/{namespace}/{name}").json()["field"] == "kind"
        assert http.get(f"/api/console/runs/investigations/{namespace}/Bad_Name").json()["field"] == "name"
        missing = http.post(
            f"/api/console/runs/investigations/{namespace}/{name}/decisions",
            json={"decisions": [{"id": "fix-9", "approved": True}]},
        )
        assert missing.status_code == 400 and missing.json()["field"] == "decisions"
        # issue 29: the error names the caller's wrong id, never the waiting ones (maybe another user's)
        assert "fix-9" in missing.json()["detail"] and "fix-1" not in missing.json()["detail"]
        assert "1 call(s) are waiting" in missing.json()["detail"]

        detail = http.get(f"/api/console/runs/investigations/{namespace}/{name}").json()
        assert detail["mayDecide"] is True
        assert [i["kind"] for i in detail["timeline"]][:2] == ["user", "tool_call"]
        decided = http.post(
            f"/api/console/runs/investigations/{namespace}/{name}/decisions",
            json={"decisions": [{"id": "fix-1", "approved": True}]},
        )
        assert decided.status_code == 200, decided.text
    digest = paused["status"]["pendingApprovals"][0]["digest"]
    assert get_inv(api_client, namespace, name)["spec"]["decisions"] == {"fix-1": {"approved": True, "digest": digest}}
    assert wait_inv(api_client, namespace, name, phase_is("Succeeded", "Failed"))["status"]["phase"] == "Succeeded"
