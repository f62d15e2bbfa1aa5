"""The scripted investigator: a scenario's reference plan as a script for the scripted model server.

Each turn of the plan is one model reply asking for its calls (with the plan's ids, which the
agent keeps: they are plain and unique in the run); the last reply is the answer, in the
Investigation's sections, each finding citing the calls it rests on as `[evidence: id, ...]`.
Steps are counted over the whole conversation, so a retried request replays the same step.
"""

from __future__ import annotations

from lestrade.evals.scenario import Scenario
from lestrade.modelserver import Scenario as Script
from lestrade.modelserver import Step, ToolCall
from lestrade.operator.tools.base import OPEN_TOOLSET

__all__ = ["script_for", "scripted_answer"]


def _escape(text: str) -> str:
    """Literal text in a model-server template (answers are Jinja templates there)."""
    return "{% raw %}" + text.replace("{% endraw %}", "") + "{% endraw %}"


def scripted_answer(scenario: Scenario) -> str:
    """The answer the scripted investigator gives, citing every planned call that read something
    (opening a toolset shows nothing)."""
    calls = [c for c in scenario.calls() if c.tool != OPEN_TOOLSET]
    ids = ", ".join(c.id or "" for c in calls)
    findings = "\n".join(f"- `{c.tool}` {_args(c.args)} [evidence: {c.id}]" for c in calls)
    conclusion = scenario.conclusion or scenario.root_cause
    return (
        f"# Alert Explanation\n\n{scenario.title} [evidence: {calls[0].id}]\n\n"
        f"# Key Findings\n\n{findings}\n\n"
        f"# Conclusions and Possible Root Causes\n\n{conclusion} [evidence: {ids}]\n\n"
        "# Next Steps\n\nFix the root cause above.\n"
    )


def _args(args: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items())


def script_for(scenario: Scenario, name: str) -> Script:
    """The model-server scenario `name` that plays `scenario`'s reference plan."""
    steps = [
        Step(tool_calls=[ToolCall(name=c.tool, arguments=dict(c.args), id=c.id) for c in turn])
        for turn in scenario.plan
    ]
    steps.append(Step(content=_escape(scripted_answer(scenario))))
    return Script(
        name=name,
        description=f"reference plan of {scenario.name}",
        steps=steps,
        step_counting="conversation",
        after_last="repeat",
    )
