"""The built-in demo model plays a crash-loop investigation filled from tool outputs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from typing import Any

import httpx
import pytest

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import demo_scenario

SECTIONS = [
    "Alert Explanation",
    "Key Findings",
    "Conclusions and Possible Root Causes",
    "Next Steps",
    "App or Infra?",
    "External links",
]


def table(headers: list[str], *rows: list[str]) -> str:
    """A kubectl-style table: columns padded to their widest cell, three spaces apart."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [headers, *rows])


POD_HEADERS = ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "NOMINATED NODE", "LABELS"]
PODS = table(
    POD_HEADERS,
    ["shop", "web-7d9f-ok1", "1/1", "Running", "0", "9m", "<none>", "app=web"],
    ["shop", "web-7d9f-abc", "0/1", "CrashLoopBackOff", "6 (30s ago)", "9m", "<none>", "app=web"],
)
DESCRIBE = """Name:             web-7d9f-abc
Namespace:        shop
Containers:
  app:
    Image:          registry.example/web:1.4.2
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
    Restart Count:  6
    Limits:
      cpu:     500m
      memory:  128Mi
"""
LOGS = "starting web 1.4.2\nloading catalog into memory\ncatalog has 2000000 items\nfatal: cannot allocate memory"
EVENTS = table(
    ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
    ["30s", "Warning", "BackOff", "pod/web-7d9f-abc", "Back-off restarting failed container app"],
    ["9m", "Normal", "Scheduled", "pod/web-7d9f-abc", "Successfully assigned shop/web-7d9f-abc"],
)


class FakeCluster:
    """Answers the demo's tool calls with canned kubectl-like output and records them."""

    def __init__(self, pods: str = PODS) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.outputs = {
            "kubectl_find_resource": pods,
            "kubectl_describe": DESCRIBE,
            "kubectl_previous_logs": LOGS,
            "kubectl_events": EVENTS,
        }

    def tools(self) -> dict[str, Any]:
        def tool(name: str) -> Any:
            def run(args: dict[str, Any]) -> str:
                self.calls.append((name, args))
                return self.outputs[name]

            return run

        return {name: tool(name) for name in self.outputs}


@pytest.mark.parametrize("stream", [False, True])
async def test_demo_investigates_a_crash_loop(agent, stream: bool) -> None:
    cluster = FakeCluster()
    run = await agent("demo", "Investigate: KubePodCrashLooping in namespace shop", cluster.tools(), stream=stream)
    assert [name for name, _ in cluster.calls] == [
        "kubectl_find_resource",
        "kubectl_describe",
        "kubectl_previous_logs",
        "kubectl_events",
    ]
    assert cluster.calls[0][1] == {"kind": "pod", "keyword": "shop"}
    assert cluster.calls[1][1] == {"kind": "pod", "name": "web-7d9f-abc", "namespace": "shop"}
    assert cluster.calls[2][1] == {"pod_name": "web-7d9f-abc", "namespace": "shop"}
    assert cluster.calls[3][1] == {"kind": "pod", "name": "web-7d9f-abc", "namespace": "shop"}
    answer = run.answer or ""
    assert answer.startswith("> **Demo model:**")
    headings = [line[2:] for line in answer.splitlines() if line.startswith("# ")]
    assert headings == SECTIONS
    for fact in [
        "web-7d9f-abc",
        "`shop`",
        "OOMKilled",
        "137",
        "128Mi",
        "registry.example/web:1.4.2",
        "fatal: cannot allocate memory",
        "Back-off restarting failed container",
        "restarted 6 times",
    ]:
        assert fact in answer, fact
    assert "**Both**" in answer  # OOMKilled: limit (infra) and memory use (app)
    assert all(turn.reasoning for turn in run.turns[:2])


@pytest.mark.parametrize(
    ("question", "keyword"),
    [
        ("Why does pod web-7d9f-abc in namespace shop keep restarting?", "web-7d9f-abc"),
        ('Title: KubePodCrashLooping\nSubject: {"namespace": "shop", "pod": "api-5c6d"}', "api-5c6d"),
        ("what is wrong in the payments namespace?", "payments"),
        ("check pod/worker-1 -n jobs", "worker-1"),
        ("Why is the pod crashing?", "CrashLoopBackOff"),
        ("Something is broken, please help", "CrashLoopBackOff"),
    ],
)
async def test_demo_takes_the_subject_from_the_question(llm, question: str, keyword: str) -> None:
    turn = await llm("demo", [{"role": "user", "content": question}])
    [call] = turn.tool_calls
    assert call["name"] == "kubectl_find_resource"
    assert json.loads(call["arguments"]) == {"kind": "pod", "keyword": keyword}


async def test_demo_reads_grep_style_rows_without_a_header(agent) -> None:
    cluster = FakeCluster(pods="jobs   worker-1   0/1   Error   3   2m   <none>   app=worker")
    await agent("demo", "pod worker-1 is failing", cluster.tools())
    assert cluster.calls[1][1] == {"kind": "pod", "name": "worker-1", "namespace": "jobs"}


async def test_demo_says_when_it_found_nothing(agent) -> None:
    cluster = FakeCluster(pods="No resources found")
    cluster.outputs.update(
        {"kubectl_describe": 'Error: pods "" not found', "kubectl_previous_logs": "", "kubectl_events": ""}
    )
    run = await agent("demo", "Something is broken, please help", cluster.tools())
    assert "could not identify a failing pod" in (run.answer or "")
    assert run.answer.startswith("> **Demo model:**")


async def test_demo_answers_each_new_question_with_a_new_investigation(agent, llm) -> None:
    run = await agent("demo", "pod web-7d9f-abc in namespace shop", FakeCluster().tools())
    follow_up = run.messages + [
        {"role": "assistant", "content": run.answer},
        {"role": "user", "content": "and what about pod api-1?"},
    ]
    [call] = (await llm("demo", follow_up)).tool_calls
    assert json.loads(call["arguments"])["keyword"] == "api-1"


async def test_demo_summarizes_for_compaction(agent, llm) -> None:
    run = await agent("demo", "pod web-7d9f-abc in namespace shop", FakeCluster().tools())
    ask = run.messages + [
        {"role": "assistant", "content": run.answer},
        {"role": "user", "content": "Summarize the conversation so far for a new context window."},
    ]
    summary = (await llm("demo", ask)).content or ""
    assert summary.startswith("> **Demo model:**")
    assert "pod `web-7d9f-abc` in namespace `shop`" in summary
    assert "OOMKilled" in summary and "fatal: cannot allocate memory" in summary


async def test_demo_answers_structured_output_requests_with_sections(agent) -> None:
    properties = {title: {"type": ["string", "null"]} for title in SECTIONS}
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "Sections", "schema": {"type": "object", "properties": properties}},
    }
    run = await agent(
        "demo", "pod web-7d9f-abc in namespace shop", FakeCluster().tools(), response_format=response_format
    )
    sections = json.loads(run.answer or "")
    assert list(sections) == SECTIONS and all(sections.values())
    assert sections["Alert Explanation"].startswith("> **Demo model:**")
    assert "more memory than its limit (`128Mi`)" in sections["Conclusions and Possible Root Causes"]


def test_demo_scenario_is_package_data() -> None:
    scenario = demo_scenario()
    assert scenario.name == "demo" and len(scenario.steps) == 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_cli_serves_the_demo_extra_scenario_files_and_the_request_log(tmp_path) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text("name: extra\nsteps: ['from a file']\n")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "lestrade.modelserver", "--port", str(port), "--scenario-file", str(extra)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def up_or_dead() -> bool:
            return process.poll() is not None or httpx.get(f"{base}/healthz", timeout=1).status_code == 200

        wait_until("the CLI model server", up_or_dead, timeout=30, interval=0.05)
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        ids = {m["id"] for m in httpx.get(f"{base}/v1/models").json()["data"]}
        assert ids == {"demo", "extra"}
        body = {"model": "extra", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{base}/v1/chat/completions", json=body).json()
        assert answer["choices"][0]["message"]["content"] == "from a file"
        # The request log, for a bench that replays what the server was sent from outside.
        assert httpx.get(f"{base}/requests", params={"scenario": "extra"}).json() == [body]
        assert httpx.get(f"{base}/requests", params={"scenario": "demo"}).json() == []
    finally:
        process.terminate()
        process.wait(10)
    assert process.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
