"""`make eval` inside `make test`: every scenario's reference plan, played by the scripted
investigator through the real operator, tools, redaction, truncation and context window, must put
every evidence fact in front of the model (evidence recall 100%), and its answer must cite only
calls that exist. The table is printed on the terminal whatever the outcome."""

from __future__ import annotations

from pathlib import Path

from lestrade.evals.metrics import RecordedSeries, recorded_prometheus
from lestrade.evals.runner import Environment, run_scripted
from lestrade.evals.scenario import load_scenarios
from lestrade.evals.table import recall_table, summary_line

SCENARIOS = Path(__file__).resolve().parents[2] / "eval" / "scenarios"


async def test_every_scenario_puts_its_evidence_in_front_of_the_model(
    api_client, crds, model_server, tmp_path, capsys, eval_namespace_removed
) -> None:
    scenarios = load_scenarios(SCENARIOS)
    assert len(scenarios) >= 40, [s.name for s in scenarios]
    series = RecordedSeries()
    with recorded_prometheus(series) as prometheus_url:
        env = Environment(api_client, tmp_path, prometheus_url=prometheus_url, series=series)
        recalls = await run_scripted(env, model_server, scenarios)
    table, line = recall_table(recalls), summary_line(recalls)
    with capsys.disabled():
        print("\n" + table + "\n" + line)
    assert [r.scenario for r in recalls] == [s.name for s in scenarios]
    assert all(r.phase == "Succeeded" for r in recalls), table
    assert line == f"evidence recall: {len(scenarios)}/{len(scenarios)} (100%)", table
