"""Grounded findings: the analysis's conclusions cite the tool calls they rest on, and one that
cites nothing or a call the run never made is flagged."""

from __future__ import annotations

from lestrade.runs.findings import cited_ids, findings

SECTIONS = {
    "Alert Explanation": "> **Demo model:** a notice, not a finding.\n\nPod web-1 was OOMKilled. [evidence: call_a]",
    "Key Findings": (
        "- The limit is 64Mi [evidence: call_a]\n"
        "- Warning events [evidence: call_b]:\n"
        "  - `BackOff restarting failed container`\n"
        "  - `Killing container`\n"
        "- The logs show a leak [evidence: call_c, call_zz]\n"
        "- Traffic doubled yesterday\n"
        "1. numbered too [Evidence: `call_b`]\n"
    ),
    "Conclusions and Possible Root Causes": "The leak exhausts memory. [evidence: call_a, call_c]",
    "Next Steps": "- Raise the limit\n- Fix the leak",
    "External links": "- [docs](https://kubernetes.io)",
}


def test_each_conclusion_is_checked_against_the_calls_of_the_run() -> None:
    found = findings(SECTIONS, {"call_a", "call_b", "call_c"})
    by_text = {f.text.splitlines()[0]: f for f in found}
    assert [f.section for f in found] == ["Alert Explanation"] + ["Key Findings"] * 5 + [
        "Conclusions and Possible Root Causes"
    ]
    assert by_text["Pod web-1 was OOMKilled. [evidence: call_a]"].grounded
    events = by_text["Warning events [evidence: call_b]:"]
    assert events.grounded and "Killing container" in events.text  # nested items belong to their parent
    leak = by_text["The logs show a leak [evidence: call_c, call_zz]"]
    assert not leak.grounded and leak.problem == "cites calls the run never made: call_zz"
    assert leak.evidence == ("call_c", "call_zz")
    traffic = by_text["Traffic doubled yesterday"]
    assert not traffic.grounded and traffic.problem == "cites no tool call"
    assert by_text["numbered too [Evidence: `call_b`]"].evidence == ("call_b",)
    assert not any("Raise the limit" in f.text or "docs" in f.text for f in found)  # advice needs no evidence


def test_citations_are_read_only_from_evidence_markers() -> None:
    assert cited_ids("x [evidence: a, b] y [evidence:a] [TRUNCATED] [link](u) [call_1]") == ["a", "b"]
    assert findings({"Key Findings": "plain paragraph one\n\nparagraph two [evidence: k]"}, {"k"})[1].grounded
    assert findings({"Next Steps": "do it"}, set()) == []
