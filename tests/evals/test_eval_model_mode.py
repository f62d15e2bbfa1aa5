"""`make eval MODEL=<name>` through its real code path (`python -m lestrade.evals --model`), with
the scripted model server standing in for both the investigating model (the demo model, which
investigates on its own: no plan) and the judge."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator

import pytest
import yaml

from lestrade.evals.__main__ import main

JUDGE = {
    "vars": {"re_found": r"<answer>[\s\S]*OOMKilled[\s\S]*</answer>"},
    "steps": [
        {
            "content": '{"root_cause_found": {{ "true" if match(re_found, text=last_user) else "false" }}, '
            '"evidence_cited": [true, false, true], "score": 0.8, "reason": "scripted judge"}'
        }
    ],
}


@pytest.fixture(autouse=True)
def _log_levels() -> Iterator[None]:
    """The command quiets some loggers; the rest of the test session keeps its levels."""
    levels = {name: logging.getLogger(name).level for name in ("kopf", "LiteLLM", "httpx", "urllib3")}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_model_mode_investigates_freely_judges_and_compares(
    cluster, crds, model_server, tmp_path, monkeypatch, eval_namespace_removed
) -> None:
    judge = f"judge-{uuid.uuid4().hex[:6]}"
    model_server.add_scenario({"name": judge, **JUDGE})
    models = tmp_path / "models.yaml"
    models.write_text(
        yaml.safe_dump({"demo": model_server.litellm_params("demo"), judge: model_server.litellm_params(judge)})
    )
    monkeypatch.setenv("LESTRADE_MODEL_LIST", str(models))
    previous = tmp_path / "previous.json"
    previous.write_text(
        json.dumps(
            {
                "model": "demo",
                "created": "2026-11-01T00:00:00Z",
                "pass_rate": 0.0,
                "tokens": 10,
                "cost": 0.0,
                "results": [{"scenario": "oom-killed", "passed": False}],
            }
        )
    )
    reports = tmp_path / "reports"

    code = main(
        [
            "--model",
            "demo",
            "--judge",
            judge,
            "--only",
            "oom-killed",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--report",
            str(reports),
            "--compare",
            str(previous),
        ]
    )

    assert code == 0
    report = json.loads((reports / "eval-report.json").read_text())
    assert (report["model"], report["judge"], report["scenarios"], report["passed"]) == ("demo", judge, 1, 1)
    row = report["results"][0]
    assert row["scenario"] == "oom-killed" and row["phase"] == "Succeeded" and row["passed"]
    assert row["verdict"]["root_cause_found"] and row["verdict"]["reason"] == "scripted judge"
    assert row["tokens"] > 0 and row["tool_calls"] >= 3
    # the demo model read the pod's termination and its crashed container's logs itself
    assert row["evidence_seen"] == row["evidence_total"] == 3
    assert row["grounding"] == []  # every finding of the demo's answer cites calls it made
    assert report["comparison"]["now_passing"] == ["oom-killed"]
    markdown = (reports / "eval-report.md").read_text()
    assert "| oom-killed | oom | yes | found | 3/3 | yes |" in markdown
    assert "now passing: oom-killed" in markdown


def test_model_mode_refuses_a_model_that_is_not_in_the_list(tmp_path, monkeypatch, capsys) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump({"fast": {"model": "openai/x", "api_base": "http://127.0.0.1:9/v1"}}))
    monkeypatch.setenv("LESTRADE_MODEL_LIST", str(models))
    assert main(["--model", "slow", "--only", "oom-killed"]) == 2
    assert "unknown model 'slow'" in capsys.readouterr().err
