"""The command line's flags go on the settings read from the environment once (`with_overrides`),
checked as the environment's own: `python -m lestrade.operator` used to read the environment,
the Job pod template and the model list three times at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from lestrade.operator.base.settings import OperatorSettings


def test_overrides_set_what_they_name_keep_the_rest_and_read_nothing_again(tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml"
    template.write_text("spec: {nodeSelector: {pool: runs}}\n")
    read = OperatorSettings.from_env({"LESTRADE_JOB_POD_TEMPLATE": str(template), "LESTRADE_MAX_CONCURRENT_RUNS": "4"})
    template.unlink()  # the overrides must not read it again
    flagged = read.with_overrides(
        process={"watch_namespaces": ("a", "b"), "liveness": None}, runs={"concurrency": 7}, jobs={"enabled": None}
    )
    assert flagged.process.watch_namespaces == ("a", "b") and flagged.runs.concurrency == 7
    assert flagged.process.liveness is None and flagged.jobs.enabled is False  # None: as read
    assert flagged.jobs.pod_template == {"spec": {"nodeSelector": {"pool": "runs"}}}
    assert flagged.runs.default_max_steps == read.runs.default_max_steps and flagged.models is read.models
    assert read.runs.concurrency == 4  # the settings read are not changed


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        ({"runs": {"concurrency": 0}}, "LESTRADE_MAX_CONCURRENT_RUNS"),
        ({"replicas": {"mode": "shared"}, "jobs": {"enabled": True}}, "Job mode"),
        ({"replicas": {"mode": "both"}}, "LESTRADE_REPLICAS"),
        ({"runs": {"concurency": 2}}, "has no concurency"),
        ({"run": {"concurrency": 2}}, "no settings group 'run'"),
    ],
)
def test_overrides_are_checked_like_the_environment(overrides: dict, refusal: str) -> None:
    with pytest.raises((ValueError, TypeError), match=refusal):
        OperatorSettings.from_env({}).with_overrides(**overrides)
    with pytest.raises((ValueError, TypeError), match=refusal):  # the same refusal as from_env's
        OperatorSettings.from_env({}, **overrides)
