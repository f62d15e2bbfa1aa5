"""HolmesGPT's 2026 chat contract over real HTTP, against the real operator and apiserver:
`GET /api/info`, resume-only turns, the request fields recorded on the Conversation (and shown
by `kubectl get -o wide`), `metadata.request_id`, 429 for a rate-limited answer, and approvals
bound to the stored call (a second API process decides what the first one paused)."""

from __future__ import annotations

import json
import subprocess
from contextlib import ExitStack
from typing import Any

import httpx
from apikit import serve, wait_ready
from convkit import get_conv
from opkit import EFFECT_LABEL, count_effects, model_list
from test_auth_api import grant

from lestrade.api.app import create_app
from lestrade.localcluster.build import binary_path
from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Fault, Scenario, Step, ToolCall


def fix(namespace: str, tag: str) -> ToolCall:
    return ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": tag})


def test_info_says_version_auth_models_and_toolsets_and_nothing_without_credentials(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="ok")]))
    grant(api_client, namespace, "reader", [("investigations", ["create"]), ("conversations", ["get"])])
    s = stack(scenario_name, auth=True)
    token = {"Authorization": f"Bearer {cluster.token_for(namespace, 'reader')}"}
    with s.client() as http:
        anonymous = http.get("/api/info")
        assert anonymous.status_code == 401 and http.get("/api/model").status_code == 401
        assert scenario_name not in anonymous.text  # no more than /api/model tells a stranger
        wait_until("RBAC to allow", lambda: http.get("/api/info", headers=token).status_code == 200, 30)
        info = http.get("/api/info", headers=token).json()
        models = http.get("/api/model", headers=token).json()["model_name"]
    assert info["server"] == "lestrade" and info["version"]
    assert info["auth"] == {"enabled": True, "methods": ["bearer", "api_key"]}
    assert [m["name"] for m in info["models"]] == models and info["default_model"] == scenario_name
    assert "api_base" not in json.dumps(info) and 'api_key"' not in json.dumps(info["models"])
    toolsets = {t["name"]: t for t in info["toolsets"]}
    assert toolsets["kubernetes"] == {"name": "kubernetes", "enabled": True, "status": "healthy"}
    assert toolsets["prometheus"]["status"] == "disabled"


def test_a_resume_only_turn_and_a_second_api_process_decide_the_stored_call(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(name=scenario_name, steps=[Step(tool_calls=[fix(namespace, tag)]), Step(content="Fixed.")])
    )
    s = stack(scenario_name)
    with s.client() as http:
        paused = http.post("/api/chat", json={"ask": "Fix it.", "enable_tool_approval": True}).json()
    assert [p["tool_call_id"] for p in paused["pending_approvals"]] == ["fix-1"]
    # Another API process (nothing shared in memory with the first) takes the decision: the
    # approval is bound to the call stored in the cluster, so it survives an API restart.
    with ExitStack() as later:
        client = later.enter_context(cluster.api_client())
        base = later.enter_context(
            serve(create_app(client, namespace=s.namespace, models=model_list(model_server, scenario_name)))
        )
        wait_ready(base)
        with httpx.Client(base_url=base, timeout=90) as http:
            resumed = http.post(
                "/api/chat",
                json={
                    "ask": "",
                    "conversation_id": paused["conversation_id"],
                    "tool_decisions": [{"tool_call_id": "fix-1", "approved": True}],
                },
            )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["analysis"] == "Fixed."
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    conv = get_conv(api_client, namespace, paused["conversation_id"])
    assert [t["ask"] for t in conv["spec"]["turns"]] == ["Fix it."]  # the resume asked nothing new
    last = model_server.requests(scenario_name)[-1]["messages"]
    users = [m for m in last if m["role"] == "user"]
    assert len(users) == 1 and users[0]["content"].startswith("Fix it.")  # no empty user message
    # `ask: ""` without anything to resume is still a mistake, naming the field
    with s.client() as http:
        empty = http.post("/api/chat", json={"ask": ""})
    assert empty.status_code == 422 and empty.json()["field"] == "ask"


def test_request_fields_are_recorded_and_shown_and_every_answer_has_a_request_id(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="One."), Step(content="Two.")]))
    s = stack(scenario_name)
    fields = {
        "user_id": "u-17",
        "user_email": "ana@example.com",
        "request_source": "slack",
        "source_ref": "https://example.slack.com/archives/C1/p2",
        "meta": {"team": "shop", "n": 1},
    }
    client_id = f"client-{scenario_name}"
    with s.client() as http:
        first = http.post("/api/chat", json={"ask": "First?", "conversation_id": client_id, **fields})
        assert first.status_code == 200, first.text
        name = first.json()["conversation_id"]
        assert first.json()["metadata"]["request_id"] == first.headers["X-Request-Id"]
        # the client's own id continues the Conversation it started
        second = http.post("/api/chat", json={"ask": "Second?", "conversation_id": client_id})
        assert second.status_code == 200, second.text
        assert second.json()["conversation_id"] == name and second.json()["analysis"] == "Two."
        assert second.json()["metadata"]["request_id"] != first.json()["metadata"]["request_id"]
        big = http.post("/api/chat", json={"ask": "x", "meta": {"k": "v" * 5000}})
        assert big.status_code == 422 and "meta" in big.text
    conv = get_conv(api_client, namespace, name)
    annotations = conv["metadata"]["annotations"]
    assert annotations["lestrade.dev/conversation-id"] == client_id
    assert annotations["lestrade.dev/user-id"] == "u-17" and annotations["lestrade.dev/request-source"] == "slack"
    assert annotations["lestrade.dev/user-email"] == "ana@example.com"
    assert json.loads(annotations["lestrade.dev/meta"]) == {"team": "shop", "n": 1}
    assert len(conv["spec"]["turns"]) == 2
    proc = subprocess.run(
        [
            str(binary_path("kubectl")),
            f"--kubeconfig={cluster.kubeconfig}",
            "get",
            "conv",
            name,
            "-n",
            namespace,
            "-o",
            "wide",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()[:2]
    start = {name: header.index(f"{name} ") for name in ("SOURCE", "USER", "MESSAGE")}  # kubectl aligns columns

    def column(name: str, until: str) -> str:
        return row[start[name] : start[until]].strip()

    assert (column("SOURCE", "USER"), column("USER", "MESSAGE")) == ("slack", "u-17"), proc.stdout
    # the console shows them on the run's page
    with s.client() as http:
        detail = http.get(f"/api/console/runs/conversations/{namespace}/{name}").json()
    assert detail["summary"]["request"]["request_source"] == "slack"
    assert detail["summary"]["request"]["user_id"] == "u-17"


def test_a_rate_limited_answer_is_a_429(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(
        Scenario(name=scenario_name, steps=[Step(content="never", fault=Fault(kind="rate_limit", retry_after=0))])
    )
    s = stack(scenario_name)
    with s.client() as http:
        limited = http.post("/api/chat", json={"ask": "hi"})
    assert limited.status_code == 429, limited.text
    assert limited.headers["Retry-After"] and limited.json()["error_code"] == 5204
    assert limited.json()["metadata"]["request_id"] == limited.headers["X-Request-Id"]
