"""`kubectl lestrade` as a person (and a script) uses it: the console script run as a
subprocess with a kubeconfig, against the real control plane and the real operator."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from opkit import EFFECT_LABEL, count_effects, get_inv
from pluginkit import grant, run_plugin

from lestrade.localcluster import binary_path
from lestrade.modelserver import Scenario, Step, ToolCall

HOSTILE = "\x1b]0;pwned\x07\x1b[2J"


def test_investigate_from_an_alert_approve_follow_list_and_transcript(
    operator: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
    tmp_path: Path,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": tag})]
                ),
                Step(
                    tool_calls=[
                        ToolCall(
                            id="probe-1",
                            name="slow_probe",
                            arguments={"namespace": namespace, "tag": tag, "seconds": 3},
                        )
                    ]
                ),
                Step(content=f"## Root cause\nThe pod ran out of memory.{HOSTILE}"),
            ],
        )
    )
    operator(scenario_name)
    alert = tmp_path / "alert.json"
    alert.write_text(
        json.dumps(
            {
                "alerts": [
                    {
                        "labels": {"alertname": "KubePodCrashLooping", "namespace": namespace, "pod": "web-1"},
                        "annotations": {"description": "web-1 restarts every minute"},
                    }
                ]
            }
        )
    )
    admin = cluster.kubeconfig

    started = run_plugin(
        admin, namespace, "investigate", "--alert", str(alert), "--name", "crash", "--stop-at-approval"
    )
    assert started.code == 3, started
    assert "investigation/crash created" in started.out
    assert "waiting for approval:" in started.out and "fix-1: apply_fix" in started.out and tag in started.out
    inv = get_inv(api_client, namespace, "crash")
    assert inv["spec"]["title"] == f"KubePodCrashLooping on {namespace}/web-1"
    assert inv["spec"]["subject"] == {"kind": "Pod", "name": "web-1", "namespace": namespace}

    # A user who may read but not patch Investigations is refused by the cluster itself.
    grant(api_client, namespace, "viewer", [("investigations", ["get", "list", "watch"])])
    viewer = cluster.kubeconfig_for(namespace, "viewer", tmp_path / "viewer.kubeconfig")
    refused = run_plugin(viewer, namespace, "approve", "crash", stdin="y\n")
    assert refused.code == 5, refused
    assert "forbidden" in refused.err.lower() and "fix-1" in refused.out
    assert "decisions" not in get_inv(api_client, namespace, "crash")["spec"]

    wrong = run_plugin(admin, namespace, "deny", "crash", "fix-9", "--reason", "no")
    assert wrong.code == 2 and "fix-9 not waiting" in wrong.err and "waiting: fix-1" in wrong.err

    # Listed with its parameters, asked, approved as the kubeconfig's user, bound to the digest.
    approved = run_plugin(admin, namespace, "approve", "crash", stdin="y\n")
    assert approved.code == 0, approved
    assert f'"tag": "{tag}"' in approved.out and "approve fix-1? [y/N]" in approved.out
    assert "approved fix-1 as " in approved.out
    digest = inv["status"]["pendingApprovals"][0]["digest"]
    assert get_inv(api_client, namespace, "crash")["spec"]["decisions"] == {
        "fix-1": {"approved": True, "digest": digest}
    }

    # Follow to the end with one-second watches: it reconnects several times during the slow
    # probe and shows every item exactly once.
    followed = run_plugin(admin, namespace, "follow", "crash", env={"LESTRADE_PLUGIN_WATCH_SECONDS": "1"})
    assert followed.code == 0, followed
    out = followed.out
    assert out.count("→ apply_fix") == 1 and out.count("→ slow_probe") == 1 and out.count("== answer ==") == 1
    assert "✔ fix-1 approved" in out and "[success]" in out and "tokens +" in out
    assert "The pod ran out of memory." in out and "investigation/crash: Succeeded" in out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;pwned\\x07" in out  # escapes made visible
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1

    listed = run_plugin(admin, namespace, "list", "-o", "json")
    assert listed.code == 0, listed
    (row,) = [r for r in json.loads(listed.out) if r["name"] == "crash"]
    assert row["phase"] == "Succeeded" and row["usage"]["totalTokens"] > 0 and row["toolCallCount"] == 2

    # kubectl itself finds the plugin on PATH: `kubectl lestrade list`.
    plugin_dir = str(Path(__file__).resolve().parents[2] / ".venv" / "bin")
    table = run_plugin(
        admin,
        namespace,
        "lestrade",
        "list",
        command=[str(binary_path("kubectl"))],
        env={"PATH": f"{plugin_dir}:{os.environ['PATH']}"},
    )
    assert table.code == 0, table
    header, *rows = table.out.splitlines()
    assert header.split()[:4] == ["KIND", "NAME", "PHASE", "AGE"] and "COST" in header
    assert any(r.split()[:3] == ["inv", "crash", "Succeeded"] for r in rows)

    transcript = run_plugin(admin, namespace, "transcript", "crash", "-o", "yaml")
    assert transcript.code == 0, transcript
    timeline = yaml.safe_load(transcript.out)["timeline"]
    calls = {i["id"]: i for i in timeline if i["kind"] == "tool_call"}
    assert calls["fix-1"]["status"] == "success" and calls["fix-1"]["output"] == f"fix {tag} applied"
    paged = run_plugin(admin, namespace, "transcript", "crash")
    assert f"fix {tag} applied" in paged.out and "you:" in paged.out


def test_a_failed_run_exits_non_zero_and_ask_answers_turn_after_turn(
    operator: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    cluster: Any,
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="The first answer."),
                Step(content="The second answer."),
            ],
        )
    )
    operator(scenario_name)
    admin = cluster.kubeconfig

    failed = run_plugin(admin, namespace, "investigate", "--title", "t", "--model", "no-such-model", "--name", "bad")
    assert failed.code == 1, failed
    assert "investigation/bad: Failed" in failed.out
    again = run_plugin(admin, namespace, "follow", "bad", "-o", "json")
    assert again.code == 1 and json.loads(again.out)["summary"]["phase"] == "Failed"
    assert run_plugin(admin, namespace, "follow", "nothing-here").code == 4
    usage = run_plugin(admin, namespace, "investigate")
    assert usage.code == 2 and "--title" in usage.err

    first = run_plugin(admin, namespace, "ask", "What", "is", "wrong?")
    assert first.code == 0, first
    assert "The first answer." in first.out
    name = first.out.split("conversation/")[1].split()[0]
    # No question: a REPL reading one question per line, in the same Conversation.
    repl = run_plugin(admin, namespace, "ask", "-c", name, stdin="And now?\n")
    assert repl.code == 0, repl
    assert "The second answer." in repl.out and "you: And now?" in repl.out
    turns = run_plugin(admin, namespace, "transcript", f"conv/{name}", "-o", "json")
    kinds = [i["kind"] for i in json.loads(turns.out)["timeline"]]
    assert kinds.count("turn") == 2 and kinds.count("answer") == 2
