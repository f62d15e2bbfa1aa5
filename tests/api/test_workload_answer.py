"""The workload health verdict checked and normalised (`api/holmes/workload.py`), without a cluster."""

from __future__ import annotations

import pytest

from lestrade.api.holmes.workload import HealthAnswerError, health_answer


@pytest.mark.parametrize(
    "verdict, healthy",
    [
        (True, True),
        (False, False),
        ("true", True),
        ("False", False),
        ("**no**", False),
        ("Healthy.", True),
        ("not healthy", False),
    ],
)
def test_verdicts_become_booleans(verdict: object, healthy: bool) -> None:
    assert health_answer({"workload_healthy": verdict, "root_cause_summary": " why "}, None) == {
        "workload_healthy": healthy,
        "root_cause_summary": "why",
    }


def test_an_analysis_that_is_the_object_itself() -> None:
    assert health_answer(None, '{"workload_healthy": false, "root_cause_summary": "OOM"}')["workload_healthy"] is False


@pytest.mark.parametrize(
    "sections, analysis, missing",
    [
        ({"root_cause_summary": "x"}, None, "no workload_healthy"),
        ({"workload_healthy": "maybe", "root_cause_summary": "x"}, None, "must be true or false"),
        ({"workload_healthy": "true", "root_cause_summary": "  "}, None, "no root_cause_summary"),
        (None, "The pod is fine.", "no workload_healthy"),
    ],
)
def test_no_verdict_is_an_error_naming_the_field(sections: dict | None, analysis: str | None, missing: str) -> None:
    with pytest.raises(HealthAnswerError, match=missing):
        health_answer(sections, analysis)
