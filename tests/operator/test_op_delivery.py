"""Delivery of results to Destinations on the real control plane: real HTTP receivers, the real
operator, one message per run end per destination, signed, in the documented formats; nothing
for OnFinding without a finding; a destination that is down does not hold the run up, and a
kill -9 while the message is still owed ends with it sent once."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import jsonschema
from deliverykit import Receiver, check_slack_message, check_teams_message
from kubernetes import client as k8s
from opkit import (
    GROUP,
    VERSION,
    OperatorProcess,
    create_inv,
    patch_decisions,
    phase_is,
    wait_inv,
    wait_until,
    write_model_list,
)

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.delivery.signing import verify
from lestrade.resources.destination import DESTINATION_SECRET_LABEL

SCHEMA = json.loads((Path(__file__).parents[2] / "docs/schemas/delivery-v1.json").read_text())
SIGNING_KEY = "s3cret-signing-key"


def secret(api_client: k8s.ApiClient, namespace: str, name: str, data: dict[str, str], *, consent: bool = True) -> None:
    labels = {DESTINATION_SECRET_LABEL: "true"} if consent else {}
    k8s.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name=name, labels=labels),
            data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        ),
    )


def destination(api_client: k8s.ApiClient, namespace: str, name: str, **spec: Any) -> None:
    k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "destinations",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Destination",
            "metadata": {"name": name},
            "spec": {"retry": {"maxAttempts": 10, "backoffSeconds": 0.5}, **spec},
        },
    )


def delivered(name: str) -> Any:
    return lambda obj: (obj.get("status") or {}).get("delivery") == "Done" and phase_is("Succeeded", "Failed")(obj)


def answer(scenario: str, text: str, **step: Any) -> Scenario:
    return Scenario(name=scenario, steps=[Step(content=text, **step)])


def test_every_destination_kind_gets_one_signed_message_per_run_end(
    start_operator: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
) -> None:
    slack_api = Receiver(answer=lambda r: (200, {"ok": True, "channel": "C123", "ts": "1700000000.000100"}))
    receivers = {
        "hook": Receiver(),
        "slack-hook": Receiver(answer=lambda r: (200, "ok")),
        "slack-bot": slack_api,
        "teams": Receiver(),
    }
    for r in receivers.values():
        r.start()
    try:
        secret(
            api_client,
            namespace,
            "keys",
            {
                "signing": SIGNING_KEY,
                "slack-url": receivers["slack-hook"].url + "/services/T/B/X",
                "token": "xoxb-test",
                "teams-url": receivers["teams"].url + "/webhookb2/x",
            },
        )
        destination(
            api_client,
            namespace,
            "hook",
            type="Webhook",
            webhook={"url": receivers["hook"].url + "/in", "signingSecretRef": {"name": "keys", "key": "signing"}},
        )
        destination(
            api_client,
            namespace,
            "slack-hook",
            type="Slack",
            slack={"webhookUrlSecretRef": {"name": "keys", "key": "slack-url"}},
            consoleUrl="https://lestrade.example",
        )
        destination(
            api_client,
            namespace,
            "slack-bot",
            type="Slack",
            slack={
                "tokenSecretRef": {"name": "keys", "key": "token"},
                "channel": "#ops",
                "apiUrl": slack_api.url + "/api",
            },
        )
        destination(
            api_client,
            namespace,
            "teams",
            type="Teams",
            teams={"webhookUrlSecretRef": {"name": "keys", "key": "teams-url"}},
        )
        model_server.add_scenario(
            answer(
                scenario_name,
                json.dumps({"Findings": "web-1 is OOMKilled", "Next steps": "raise <!channel> the limit"}),
            )
        )
        start_operator(scenario_name)
        create_inv(
            api_client,
            namespace,
            "crash",
            sections={"Findings": "what is wrong", "Next steps": "what to do"},
            deliver=[{"destination": d} for d in receivers],
        )
        done = wait_inv(api_client, namespace, "crash", delivered("crash"), timeout=120)

        records = {r["destination"]: r for r in done["status"]["deliveries"]}
        assert {d: (r["state"], r["attempts"]) for d, r in records.items()} == {d: ("Sent", 1) for d in receivers}
        assert records["slack-bot"]["ref"] == "C123/1700000000.000100"
        uid = done["metadata"]["uid"]
        for name, receiver in receivers.items():
            (got,) = receiver.requests()  # exactly one each
            assert got.headers["x-lestrade-delivery"] == f"{uid}/end/{name}"

        (hook,) = receivers["hook"].requests()
        assert verify(
            SIGNING_KEY.encode(),
            hook.headers["x-lestrade-timestamp"],
            hook.body,
            hook.headers["x-lestrade-signature"],
            now=time.time(),
        )
        payload = hook.json()
        jsonschema.validate(payload, SCHEMA)
        assert (payload["event"], payload["status"], payload["run"]["phase"]) == (
            "run.finished",
            "resolved",
            "Succeeded",
        )
        assert payload["run"]["sections"]["Findings"] == "web-1 is OOMKilled"

        (slack,) = receivers["slack-hook"].requests()
        check_slack_message(slack.json())
        assert slack.path == "/services/T/B/X"
        assert "&lt;!channel&gt;" in slack.body.decode() and "<!channel>" not in slack.body.decode()
        assert "https://lestrade.example/#/run/investigations/" in slack.body.decode()
        (bot,) = slack_api.requests()
        assert bot.path == "/api/chat.postMessage" and bot.headers["authorization"] == "Bearer xoxb-test"
        assert bot.json()["channel"] == "#ops"
        check_slack_message({k: v for k, v in bot.json().items() if k != "channel"})
        (teams,) = receivers["teams"].requests()
        check_teams_message(teams.json())

        dest = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "destinations", "hook"
        )
        assert dest["status"]["lastState"] == "Sent" and dest["status"]["lastRun"] == "Investigation/crash"
    finally:
        for r in receivers.values():
            r.stop()


def test_on_finding_sends_nothing_when_nothing_was_found(
    start_operator: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
) -> None:
    with Receiver() as receiver:
        destination(api_client, namespace, "hook", type="Webhook", webhook={"url": receiver.url})
        quiet, noisy = f"{scenario_name}-q", f"{scenario_name}-n"
        model_server.add_scenario(answer(quiet, json.dumps({"Findings": "None", "Checked": "all pods"})))
        model_server.add_scenario(answer(noisy, json.dumps({"Findings": "web-1 is OOMKilled", "Checked": "all pods"})))
        start_operator(quiet, noisy)
        sections = {"Findings": "what is wrong, or None", "Checked": "what you looked at"}
        for name, model in (("quiet", quiet), ("noisy", noisy)):
            create_inv(
                api_client,
                namespace,
                name,
                model=model,
                sections=sections,
                deliver=[
                    {"destination": "hook", "when": "OnFinding"},
                    {"destination": "hook-fail", "when": "OnFailure"},
                ],
            )
        quiet_done = wait_inv(api_client, namespace, "quiet", delivered("quiet"), timeout=120)
        noisy_done = wait_inv(api_client, namespace, "noisy", delivered("noisy"), timeout=120)
        assert quiet_done["status"].get("deliveries", []) == []
        assert [(r["destination"], r["state"]) for r in noisy_done["status"]["deliveries"]] == [("hook", "Sent")]
        assert [r.json()["run"]["name"] for r in receiver.requests()] == ["noisy"]


def test_a_slack_approval_message_is_resolved_in_place_when_the_run_ends(
    start_operator: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
) -> None:
    """Alertmanager's firing → resolved: the pause is told with Approve/Deny buttons, and the
    end updates that very message (chat.update of its ts) and names it in `resolves`."""
    counter = iter(range(100))
    slack_api = Receiver(answer=lambda r: (200, {"ok": True, "channel": "C9", "ts": f"17.{next(counter)}"}))
    with slack_api, Receiver() as hook:
        secret(api_client, namespace, "slack", {"token": "xoxb-t"})
        destination(
            api_client,
            namespace,
            "bot",
            type="Slack",
            slack={"tokenSecretRef": {"name": "slack", "key": "token"}, "channel": "C9", "apiUrl": slack_api.url},
        )
        destination(api_client, namespace, "hook", type="Webhook", webhook={"url": hook.url})
        model_server.add_scenario(
            Scenario(
                name=scenario_name,
                steps=[
                    Step(
                        tool_calls=[
                            ToolCall(
                                id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": scenario_name}
                            )
                        ]
                    ),
                    Step(content="Fixed it."),
                ],
            )
        )
        start_operator(scenario_name)
        create_inv(api_client, namespace, "fixme", deliver=[{"destination": "bot"}, {"destination": "hook"}])
        wait_until(
            "the approval message", lambda: len(slack_api.requests()) == 1 and len(hook.requests()) == 1, timeout=120
        )
        (ask,) = slack_api.requests()
        assert ask.path == "/chat.postMessage"
        buttons = [e for b in ask.json()["blocks"] if b["type"] == "actions" for e in b["elements"] if "value" in e]
        assert [b["action_id"] for b in buttons] == ["lestrade.approve", "lestrade.deny"]
        assert json.loads(buttons[0]["value"])["call"] == "fix-1"
        firing = hook.requests()[0].json()
        assert (firing["event"], firing["status"], firing["pendingApprovals"][0]["toolCallId"]) == (
            "run.awaitingApproval",
            "firing",
            "fix-1",
        )

        patch_decisions(api_client, namespace, "fixme", {"fix-1": {"approved": True}})
        done = wait_inv(api_client, namespace, "fixme", delivered("fixme"), timeout=120)
        assert [r.path for r in slack_api.requests()] == ["/chat.postMessage", "/chat.update"]
        update = slack_api.requests()[1].json()
        assert (update["channel"], update["ts"]) == ("C9", "17.0")
        check_slack_message({k: v for k, v in update.items() if k not in ("channel", "ts")})
        resolved = hook.requests()[1].json()
        assert (resolved["status"], resolved["groupKey"]) == ("resolved", firing["groupKey"])
        assert resolved["resolves"] == [firing["id"]]
        assert len(done["status"]["deliveries"]) == 4 and {r["state"] for r in done["status"]["deliveries"]} == {"Sent"}


def test_a_conversation_turn_is_delivered(
    start_operator: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
) -> None:
    with Receiver() as hook:
        destination(api_client, namespace, "hook", type="Webhook", webhook={"url": hook.url})
        model_server.add_scenario(answer(scenario_name, "Two pods are pending."))
        start_operator(scenario_name)
        k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "conversations",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Conversation",
                "metadata": {"name": "chat"},
                "spec": {"turns": [{"ask": "anything pending?"}], "deliver": [{"destination": "hook"}]},
            },
        )
        (got,) = wait_until("the turn's message", hook.requests, timeout=120)
        payload = got.json()
        jsonschema.validate(payload, SCHEMA)
        assert (payload["run"]["kind"], payload["run"]["turn"], payload["run"]["analysis"]) == (
            "Conversation",
            0,
            "Two pods are pending.",
        )


def test_a_destination_that_is_down_holds_nothing_up_and_a_kill_9_sends_once(
    cluster: Any,
    api_client: k8s.ApiClient,
    crds: None,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    tmp_path: Path,
) -> None:
    receiver = Receiver()  # its port is reserved, nobody listens yet: the destination is down
    secret(api_client, namespace, "keys", {"signing": SIGNING_KEY})
    # 5 s between attempts: the kill lands while the message waits to be retried (a kill
    # during an attempt is the other case: its claim is taken over after 3 attempt timeouts).
    destination(
        api_client,
        namespace,
        "hook",
        type="Webhook",
        webhook={"url": receiver.url + "/in", "signingSecretRef": {"name": "keys", "key": "signing"}},
        retry={"maxAttempts": 10, "backoffSeconds": 5},
    )
    model_server.add_scenario(answer(scenario_name, "Done."))
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
    first = OperatorProcess(cluster, namespace, models, tmp_path / "operator-1.log").start()
    second = None
    try:
        create_inv(api_client, namespace, "down", deliver=[{"destination": "hook"}])
        retrying = wait_inv(
            api_client,
            namespace,
            "down",
            lambda o: (
                phase_is("Succeeded")(o)
                and any(r["state"] == "Retrying" for r in (o.get("status") or {}).get("deliveries") or [])
            ),
            timeout=120,
        )
        assert retrying["status"]["delivery"] == "Pending"
        assert (
            "ConnectionRefused" in retrying["status"]["deliveries"][0]["lastError"]
            or "Connect" in retrying["status"]["deliveries"][0]["lastError"]
        )
        first.kill()  # the run has ended, its message is still owed
        receiver.start()
        second = OperatorProcess(cluster, namespace, models, tmp_path / "operator-2.log").start()
        done = wait_inv(api_client, namespace, "down", delivered("down"), timeout=120)
        (record,) = done["status"]["deliveries"]
        assert record["state"] == "Sent" and record["attempts"] >= 2
        (got,) = receiver.requests()
        assert got.headers["x-lestrade-delivery"] == record["id"]
        assert verify(
            SIGNING_KEY.encode(),
            got.headers["x-lestrade-timestamp"],
            got.body,
            got.headers["x-lestrade-signature"],
            now=time.time(),
        )
        # A later run to the same destination: the first is not sent again by anyone.
        create_inv(api_client, namespace, "later", deliver=[{"destination": "hook"}])
        wait_inv(api_client, namespace, "later", delivered("later"), timeout=120)
        assert [r.json()["run"]["name"] for r in receiver.requests()] == ["down", "later"]
    finally:
        first.kill() if first.alive() else None
        if second is not None and second.alive():
            second.terminate()
        receiver.stop()
