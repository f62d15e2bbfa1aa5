"""The scripted OpenAI-compatible model server: the test double and the built-in demo model.

No real LLM is reachable in tests or on a fresh machine, so every caller drives litellm's real
client over real HTTP against this server, which replays scenarios chosen by the request's
`model` field (litellm model `openai/<scenario>`). See `scenario.py` for the script format,
`templating.py` for what answers can quote, and `demo.yaml` for the demo model.

    from lestrade.modelserver import ScriptedModelServer, Scenario, Step, ToolCall
    with ScriptedModelServer() as server:
        server.add_scenario(Scenario(name="hi", steps=[Step(content="hello")]))
        litellm.completion(messages=[...], **server.litellm_params("hi"))
"""

from lestrade.modelserver.scenario import (
    Fault,
    Rule,
    RuleCondition,
    Scenario,
    Step,
    ToolCall,
    Usage,
    load_scenarios,
)
from lestrade.modelserver.server import DEMO_SCENARIO_FILE, ScriptedModelServer, demo_scenario

__all__ = [
    "DEMO_SCENARIO_FILE",
    "Fault",
    "Rule",
    "RuleCondition",
    "Scenario",
    "ScriptedModelServer",
    "Step",
    "ToolCall",
    "Usage",
    "demo_scenario",
    "load_scenarios",
]
