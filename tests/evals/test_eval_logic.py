"""The suite's pure logic: scenario files, where a lost fact was lost, citations, the judge's
verdicts, reports and their comparison, and the table's last line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lestrade.evals.judge import ScenarioReport, Verdict, build_report, compare_reports, markdown_report, parse_verdict
from lestrade.evals.recall import CallTrace, cited_ids, measure
from lestrade.evals.scenario import GeneratedLines, load_scenario, load_scenarios, namespace_for
from lestrade.evals.script import script_for, scripted_answer
from lestrade.evals.staging import STATUS_ANNOTATION, prepare, render_lines
from lestrade.evals.table import recall_table, summary_line

SCENARIOS = Path(__file__).resolve().parents[2] / "eval" / "scenarios"


def _scenario(tmp_path: Path, body: str, cluster: str = "") -> Path:
    folder = tmp_path / "broken-thing"
    folder.mkdir(parents=True)
    (folder / "scenario.yaml").write_text(body)
    if cluster:
        (folder / "cluster.yaml").write_text(cluster)
    return folder


SPEC = """\
title: "web-0 crashes in ${namespace}"
category: oom
root_cause: It runs out of memory.
evidence:
  - {text: OOMKilled}
  - {regex: 'Limit:\\s+64Mi'}
plan:
  - - {tool: kubectl_describe, args: {kind: pod, name: web-0, namespace: "${namespace}"}}
    - {tool: kubectl_previous_logs, args: {pod_name: web-0, namespace: "${namespace}"}, id: logs}
  - - {tool: mcp_logs__search, args: {query: oom}}
"""


def test_a_scenario_folder_loads_with_its_namespace_and_call_ids(tmp_path) -> None:
    folder = _scenario(tmp_path, SPEC, "apiVersion: v1\nkind: Pod\nmetadata: {name: web-0, namespace: ${namespace}}\n")
    scenario = load_scenario(folder)
    ns = namespace_for("broken-thing")
    assert ns.startswith("eval-") and "broken" not in ns  # a model must not read the cause in a name
    assert scenario.title == f"web-0 crashes in {ns}"
    assert [c.id for c in scenario.calls()] == ["ev-1", "logs", "ev-3"]
    assert scenario.calls()[0].args["namespace"] == ns
    assert scenario.manifests[0]["metadata"]["namespace"] == ns


@pytest.mark.parametrize(
    "bad, message",
    [
        (SPEC.replace("category: oom\n", ""), "category"),
        (SPEC.replace("  - {text: OOMKilled}\n", "  - {text: OOMKilled, regex: x}\n"), "exactly one of text or regex"),
        (SPEC.replace("root_cause:", "root_cuase:"), "root_cuase"),
        (SPEC.replace("id: logs", "id: ev-1"), "used twice"),
    ],
)
def test_a_broken_scenario_file_names_the_file_and_the_problem(tmp_path, bad, message) -> None:
    folder = _scenario(tmp_path, bad)
    with pytest.raises(ValueError) as err:
        load_scenario(folder)
    assert "scenario.yaml" in str(err.value) and message in str(err.value)


def test_the_shipped_scenarios_cover_the_issue() -> None:
    scenarios = load_scenarios(SCENARIOS)
    assert len(scenarios) >= 40
    categories = {s.category for s in scenarios}
    for needed in (
        "oom",
        "config-ref",
        "image-pull",
        "pending-resources",
        "pending-taints",
        "pending-pvc",
        "probes",
        "service-selector",
        "dns",
        "networkpolicy",
        "hpa",
        "quota",
        "node-pressure",
        "cert",
        "dependency-metrics",
        "noise",
        "rollout",
    ):
        assert needed in categories, needed
    assert len({s.namespace for s in scenarios}) == len(scenarios)
    with pytest.raises(ValueError, match="no such scenario"):
        load_scenarios(SCENARIOS, ["not-a-scenario"])


def test_pods_get_their_recorded_status_through_an_annotation_and_the_kwok_toleration(tmp_path) -> None:
    scenario = load_scenario(_scenario(tmp_path, SPEC))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": []},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ErrImagePull"}}}],
        },
    }
    doc, status = prepare(pod, scenario)
    assert status is None and "status" not in doc and "status" in pod  # the input is not changed
    assert "ErrImagePull" in doc["metadata"]["annotations"][STATUS_ANNOTATION]
    assert {"key": "kwok.x-k8s.io/node", "operator": "Exists"} in doc["spec"]["tolerations"]
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h"},
        "spec": {},
        "status": {"currentReplicas": 3},
    }
    doc, status = prepare(hpa, scenario)
    assert status == {"currentReplicas": 3} and "annotations" not in doc["metadata"]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": []}}},
    }
    assert prepare(deployment, scenario)[0]["spec"]["template"]["spec"]["tolerations"]


def test_generated_logs_put_the_key_line_at_its_number() -> None:
    text = render_lines(GeneratedLines(lines=5000, filler=["ok {n}", "tick"], insert={1234: "ERROR the one"}))
    lines = text.splitlines()
    assert len(lines) == 5000 and lines[1233] == "ERROR the one" and lines[0] == "ok 1" and lines[1] == "tick"
    assert sum("ERROR" in line for line in lines) == 1


def _requests(*tool_results: tuple[str, str], extra: str = "") -> list[dict]:
    messages = [{"role": "system", "content": "be helpful"}, {"role": "user", "content": "why? " + extra}]
    for call_id, content in tool_results:
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return [{"messages": messages}]


def test_recall_finds_facts_in_what_the_model_received_and_says_where_the_others_were_lost(tmp_path) -> None:
    scenario = load_scenario(_scenario(tmp_path, SPEC))
    traces = [
        CallTrace(
            "ev-1",
            "kubectl_describe",
            raw="Reason: OOMKilled\n  Limit: 64Mi",
            redacted="Reason: OOMKilled\n  Limit: 64Mi",
        ),
        CallTrace("logs", "kubectl_previous_logs", raw="", redacted=""),
        CallTrace("ev-3", "mcp_logs__search", tool_missing=True),
    ]
    answer = {"Conclusions": "OOM [evidence: ev-1, logs]"}
    ok = measure(
        scenario,
        _requests(("ev-1", "Reason: OOMKilled\n  Limit:   64Mi")),
        traces,
        sections=answer,
        call_ids=["ev-1", "logs", "ev-3"],
    )
    assert ok.covered and ok.reached == 2 and ok.losses() == {}

    truncated = measure(
        scenario,
        _requests(("ev-1", "Reason: OOMKilled\n[TRUNCATED]")),
        traces,
        sections=answer,
        call_ids=["ev-1", "logs"],
    )
    assert not truncated.covered and truncated.losses() == {"truncated": 1}

    redacted = [
        CallTrace(
            "ev-1",
            "kubectl_describe",
            raw="Reason: OOMKilled\n  Limit: 64Mi",
            redacted="Reason: OOMKilled\n  Limit: [REDACTED]",
        )
    ]
    assert measure(scenario, _requests(("ev-1", "Reason: OOMKilled")), redacted).losses() == {"redacted": 1}

    nothing = [
        CallTrace("ev-1", "kubectl_describe", raw="Reason: Error", redacted="Reason: Error"),
        CallTrace("ev-3", "mcp_logs__search", tool_missing=True),
    ]
    assert measure(scenario, _requests(("ev-1", "Reason: Error")), nothing).losses() == {"no tool": 2}

    never_sent = measure(scenario, _requests(), traces)
    assert never_sent.losses() == {"not run": 2}
    compacted = measure(scenario, _requests(("logs", "")), traces)
    assert compacted.losses() == {"compacted": 2}


def test_an_answer_that_cites_nothing_or_an_unknown_call_fails_the_scenario(tmp_path) -> None:
    scenario = load_scenario(_scenario(tmp_path, SPEC))
    requests = _requests(("ev-1", "OOMKilled Limit: 64Mi"))
    uncited = measure(
        scenario,
        requests,
        [],
        sections={"Key Findings": "- It is OOM.\n- Limit 64Mi [evidence: ev-1]"},
        call_ids=["ev-1"],
    )
    assert not uncited.covered and uncited.citations == ["Key Findings: cites no tool call"]
    forged = measure(
        scenario, requests, [], sections={"Conclusions": "OOM [evidence: ev-1, call_999]"}, call_ids=["ev-1"]
    )
    assert not forged.covered and "call_999" in forged.citations[0]
    advice_only = measure(scenario, requests, [], sections={"Next Steps": "raise the limit"}, call_ids=["ev-1"])
    assert advice_only.citations == ["the answer states no findings"]
    assert cited_ids("a [evidence: a1, b-2] b [Evidence:c_3] [TRUNCATED] [link](x)") == ["a1", "b-2", "c_3"]


def test_the_script_plays_the_plan_and_cites_every_call(tmp_path) -> None:
    scenario = load_scenario(_scenario(tmp_path, SPEC))
    script = script_for(scenario, "eval-x")
    assert [[c.name for c in s.tool_calls] for s in script.steps[:-1]] == [
        ["kubectl_describe", "kubectl_previous_logs"],
        ["mcp_logs__search"],
    ]
    assert script.steps[0].tool_calls[1].id == "logs"
    assert cited_ids(scripted_answer(scenario)) and set(cited_ids(scripted_answer(scenario))) == {
        "ev-1",
        "logs",
        "ev-3",
    }
    assert "{% raw %}" in (script.steps[-1].content or "")  # braces in facts are not templates


def test_table_and_summary_line(tmp_path) -> None:
    scenario = load_scenario(_scenario(tmp_path, SPEC))
    good = measure(
        scenario,
        _requests(("ev-1", "OOMKilled Limit: 64Mi")),
        [],
        sections={"Key Findings": "x [evidence: ev-1]"},
        call_ids=["ev-1"],
        tokens=1234,
        phase="Succeeded",
    )
    bad = measure(
        scenario,
        _requests(),
        [CallTrace("ev-1", "kubectl_describe", raw="x", redacted="x")],
        sections={"Key Findings": "x [evidence: ev-1]"},
        call_ids=["ev-1"],
        phase="Succeeded",
    )
    table = recall_table([good, bad])
    assert table.splitlines()[0].split()[:4] == ["SCENARIO", "RECALL", "TOKENS", "TRUNCATED"]
    assert "1234" in table and "FAIL" in table and "missing 'OOMKilled'" in table
    assert summary_line([good, bad]) == "evidence recall: 1/2 (50%)"
    assert summary_line([good]) == "evidence recall: 1/1 (100%)"


def test_verdicts_are_parsed_strictly() -> None:
    v = parse_verdict('Sure! {"root_cause_found": true, "evidence_cited": [true], "score": 0.9, "reason": "ok"}', 2)
    assert v.root_cause_found and v.evidence_cited == [True, False] and v.score == 0.9 and v.error is None
    assert parse_verdict("the answer is right", 1).error
    assert parse_verdict('{"root_cause_found": "yes"}', 1).error  # not a boolean: not a pass
    assert parse_verdict('{"root_cause_found": false, "score": 7}', 0).score == 1.0


def test_reports_compare_with_an_earlier_one() -> None:
    def row(name: str, passed: bool) -> ScenarioReport:
        return ScenarioReport(
            name,
            "oom",
            passed,
            Verdict(passed, [passed], 1.0 if passed else 0.0, "r"),
            "Succeeded",
            3.0,
            100,
            0.01,
            2,
            1,
            1,
        )

    old = build_report("model-a", "model-a", [row("a", False), row("b", True)])
    new = build_report("model-b", "model-a", [row("a", True), row("b", False), row("c", True)])
    diff = compare_reports(new, old)
    assert diff["now_passing"] == ["a"] and diff["now_failing"] == ["b"]
    assert diff["pass_rate"] == [0.5, round(2 / 3, 4)]
    md = markdown_report(new, diff)
    assert "| a | oom | yes |" in md and "now failing: b" in md and "model-b" in md


def _registry_as_in_the_suite():
    from kubernetes.client import ApiClient, Configuration

    from lestrade.operator.tools.registry import default_registry

    config = Configuration()
    config.host = "https://127.0.0.1:1"  # never contacted: building a registry makes no requests
    return default_registry(ApiClient(config), prometheus_url="http://127.0.0.1:9")


def test_a_plan_must_open_a_deferred_toolset_before_it_calls_its_tools(tmp_path) -> None:
    """A scripted plan calling a tool the model was not offered yet measures a path no model
    could take: the scenario fails (a deferred toolset is opened in an earlier turn)."""
    from lestrade.evals.runner import unoffered_calls

    registry = _registry_as_in_the_suite()
    unopened = SPEC.replace(
        "{tool: mcp_logs__search, args: {query: oom}}", "{tool: prometheus_instant_query, args: {query: up}}"
    )
    scenario = load_scenario(_scenario(tmp_path, unopened))
    assert unoffered_calls(registry, scenario) == [
        "ev-3 calls prometheus_instant_query, not offered yet (open its toolset in an earlier turn)"
    ]
    flagged = measure(scenario, _requests(("ev-1", "OOMKilled Limit: 64Mi")), [], call_ids=["ev-1"])
    flagged.unoffered = unoffered_calls(registry, scenario)
    assert not flagged.covered and "not offered yet" in recall_table([flagged])
    opened_in_the_same_turn = unopened.replace(
        "  - - {tool: prometheus_instant_query",
        "    - {tool: open_toolset, args: {name: prometheus}}\n  - - {tool: prometheus_instant_query",
    )
    scenario = load_scenario(_scenario(tmp_path / "b", opened_in_the_same_turn))
    assert unoffered_calls(registry, scenario) == []
    assert "open_toolset" not in scripted_answer(scenario)  # an opening is no evidence


def test_the_shipped_plans_open_what_they_use() -> None:
    from lestrade.evals.runner import unoffered_calls

    registry = _registry_as_in_the_suite()
    problems = {s.name: unoffered_calls(registry, s) for s in load_scenarios(SCENARIOS)}
    assert {name: p for name, p in problems.items() if p} == {}
    opened = [s.name for s in load_scenarios(SCENARIOS) if any(c.tool == "open_toolset" for c in s.calls())]
    assert len(opened) >= 10  # the prometheus and bash plans
