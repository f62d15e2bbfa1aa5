"""The section parser accepts every shape a model answers in."""

from __future__ import annotations

import json

from lestrade.operator.agent import DEFAULT_SECTIONS, format_answer, parse_sections

TITLES = list(DEFAULT_SECTIONS)


def test_json_in_a_code_fence() -> None:
    body = {"Alert Explanation": "Pod web-1 was OOMKilled.", "Key Findings": "limit 64Mi"}
    text = f"Here you go:\n```json\n{json.dumps(body)}\n```\nThanks."
    assert parse_sections(text, TITLES) == body


def test_bare_json_with_raw_newlines_and_case_differences() -> None:
    text = '{"alert explanation": "line one\nline two", "NEXT STEPS": ["raise the limit", "redeploy"]}'
    assert parse_sections(text, TITLES) == {
        "Alert Explanation": "line one\nline two",
        "Next Steps": "- raise the limit\n- redeploy",
    }


def test_json_wrapped_in_a_sections_key_and_nulls_dropped() -> None:
    text = json.dumps({"sections": {"Key Findings": "x", "External links": None}})
    assert parse_sections(text, TITLES) == {"Key Findings": "x"}


def test_markdown_headings_with_numbering_extra_and_missing_sections() -> None:
    text = (
        "Intro line.\n"
        "## 1. Alert Explanation\nThe pod crashed.\n\n"
        "### detail\nnested heading stays content\n"
        "## Key findings:\n- exit code 137\n"
        "## Something Else\nextra\n"
    )
    assert parse_sections(text, TITLES) == {
        "Alert Explanation": "The pod crashed.\n\n### detail\nnested heading stays content",
        "Key Findings": "- exit code 137",
        "Something Else": "extra",
    }


def test_bold_line_headings() -> None:
    text = "**Alert Explanation**\nA\n\n**App or Infra?**\nInfra."
    assert parse_sections(text, TITLES) == {"Alert Explanation": "A", "App or Infra?": "Infra."}


def test_a_json_example_in_prose_does_not_hide_the_headings() -> None:
    text = '# Next Steps\nApply `{"spec": {"replicas": 2}}` to the deployment.'
    assert parse_sections(text, TITLES) == {"Next Steps": 'Apply `{"spec": {"replicas": 2}}` to the deployment.'}


def test_plain_text_has_no_sections() -> None:
    assert parse_sections("The cluster looks healthy.", TITLES) is None
    assert format_answer("The cluster looks healthy.", TITLES) == (
        "The cluster looks healthy.",
        None,
    )


def test_format_renders_json_as_markdown_in_requested_order() -> None:
    text = json.dumps({"Key Findings": "B", "Alert Explanation": "A", "Extra": "C"})
    analysis, sections = format_answer(text, TITLES)
    assert sections == {"Key Findings": "B", "Alert Explanation": "A", "Extra": "C"}
    assert analysis == "# Alert Explanation\n\nA\n\n# Key Findings\n\nB\n\n# Extra\n\nC"


def test_format_keeps_a_markdown_answer_as_written() -> None:
    text = "Summary first.\n\n# Key Findings\nB"
    assert format_answer(text, TITLES) == (text, {"Key Findings": "B"})
