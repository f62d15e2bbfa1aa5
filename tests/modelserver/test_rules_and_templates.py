"""Rules answer regardless of position; templates quote what the tools returned."""

from __future__ import annotations

import json
from pathlib import Path

import litellm
import pytest
import yaml

from lestrade.modelserver import Scenario, load_scenarios
from lestrade.modelserver.templating import rows

DESCRIBE = """Name:         web-7d9f-abc
Namespace:    shop
Containers:
  app:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
"""


def history(*tool_outputs: tuple[str, dict, str], user: str = "why is web failing?") -> list[dict]:
    """A conversation where the model called each (name, args) and the tool answered output."""
    messages: list[dict] = [{"role": "system", "content": "You are Lestrade."}, {"role": "user", "content": user}]
    for number, (name, args, output) in enumerate(tool_outputs):
        call_id = f"c{number}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    return messages


async def test_rules_win_over_positional_steps(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {
            "name": scenario_name,
            "steps": ["positional"],
            "rules": [
                {"when": {"last_user_contains": "(?i)summari[sz]e"}, "respond": "a summary"},
                {"when": {"system_contains": "TITLE MODE"}, "respond": "a title"},
                {"when": {"any_message_contains": "OOMKilled", "last_user_contains": "memory"}, "respond": "oom"},
            ],
        }
    )
    deep = history(("kubectl_describe", {}, DESCRIBE), ("kubectl_logs", {}, "boom"))
    assert (await llm(scenario_name, deep)).content == "positional"
    summarize = deep + [{"role": "user", "content": "Please SUMMARIZE everything"}]
    assert (await llm(scenario_name, summarize)).content == "a summary"
    titled = [{"role": "system", "content": "TITLE MODE"}, {"role": "user", "content": "x"}]
    assert (await llm(scenario_name, titled)).content == "a title"
    memory = deep + [{"role": "user", "content": "is it memory?"}]
    assert (await llm(scenario_name, memory)).content == "oom"  # both conditions hold
    other = deep + [{"role": "user", "content": "is it disk?"}]
    assert (await llm(scenario_name, other)).content == "positional"


async def test_templates_quote_tool_outputs(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {
            "name": scenario_name,
            "vars": {"re_exit": r"Exit Code:\s*(\d+)", "pod": "{{ tool_args('kubectl_describe').get('name', '?') }}"},
            "steps": [
                {
                    "content": (
                        "reason={{ match('OOMKilled|CrashLoopBackOff', tool='kubectl_describe') }} "
                        "exit={{ match(re_exit, tool='kubectl_describe') }} "
                        "missing=[{{ match('nothing-like-this', tool='kubectl_describe') }}] "
                        "pod={{ pod }} user={{ last_user }} step={{ step }} "
                        "logs={{ tool_output('kubectl_logs') }} none=[{{ tool_output('kubectl_top') }}] "
                        "last={{ tool_output() }}"
                    )
                }
            ],
        }
    )
    messages = history(
        ("kubectl_describe", {"kind": "pod", "name": "web-7d9f-abc"}, DESCRIBE),
        ("kubectl_logs", {"name": "web-7d9f-abc"}, "panic: out of memory"),
        user="look at web",
    )
    turn = await llm(scenario_name, messages, stream=True)
    assert turn.content == (
        "reason=CrashLoopBackOff exit=137 missing=[] pod=web-7d9f-abc user=look at web step=0 "
        "logs=panic: out of memory none=[] last=panic: out of memory"
    )


async def test_templates_in_tool_call_arguments(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {
            "name": scenario_name,
            "vars": {"re_pod": r"pod\s+(\S+)"},
            "steps": [
                {
                    "tool_calls": [
                        {
                            "name": "kubectl_describe",
                            "arguments": {"kind": "pod", "name": "{{ match(re_pod, text=last_user) }}"},
                        },
                        {"name": "bash", "arguments": '{"command": "echo {{ last_user | length }}"}'},
                    ]
                }
            ],
        }
    )
    turn = await llm(scenario_name, [{"role": "user", "content": "check pod api-1"}])
    assert json.loads(turn.tool_calls[0]["arguments"]) == {"kind": "pod", "name": "api-1"}
    assert json.loads(turn.tool_calls[1]["arguments"]) == {"command": "echo 15"}


async def test_template_errors_fail_loudly(llm, model_server, scenario_name) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": ["{{ no_such_name }}"]})
    with pytest.raises(litellm.InternalServerError, match="no_such_name"):
        await llm(scenario_name, [{"role": "user", "content": "x"}])


def test_templates_cannot_reach_python_internals() -> None:
    scenario = Scenario.model_validate({"name": "evil", "steps": ["{{ last_user.__class__.__mro__ }}"]})
    from lestrade.modelserver.conversation import Conversation
    from lestrade.modelserver.script import render_reply, select_step
    from lestrade.modelserver.templating import TemplateRenderError

    conversation = Conversation([{"role": "user", "content": "x"}])
    with pytest.raises(TemplateRenderError):
        render_reply(scenario, select_step(scenario, conversation), conversation, None)


def test_rows_parses_kubectl_tables() -> None:
    text = (
        "NAMESPACE   NAME          READY   STATUS             RESTARTS      AGE   NOMINATED NODE\n"
        "shop        web-1         0/1     CrashLoopBackOff   5 (2m ago)    10m   <none>\n"
        "shop        api-2         1/1     Running            0             10m   <none>\n"
        "\n"
        "trailing text\n"
    )
    parsed = rows(text)
    assert [r["NAME"] for r in parsed] == ["web-1", "api-2"]
    assert parsed[0]["RESTARTS"] == "5 (2m ago)" and parsed[0]["NOMINATED NODE"] == "<none>"
    assert [r["NAME"] for r in rows(text, STATUS="Crash")] == ["web-1"]
    assert rows("NAME READY STATUS\nweb 0/1 Error\n") == [{"NAME": "web", "READY": "0/1", "STATUS": "Error"}]
    assert rows("no table here") == []


async def test_markdown_answer_becomes_json_for_structured_output(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {
            "name": scenario_name,
            "steps": [
                "> note\n\n# Alert Explanation\nweb crashes\n\n## Next Steps\n1. fix\n```sh\n# not a heading\n```\n"
            ],
        }
    )
    schema = {
        "type": "object",
        "properties": {
            "alert_explanation": {"type": "string"},
            "next_steps": {"type": "string"},
            "other": {"type": "string"},
        },
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "Sections", "schema": schema}}
    turn = await llm(scenario_name, [{"role": "user", "content": "x"}], response_format=response_format)
    assert json.loads(turn.content) == {
        "alert_explanation": "> note\n\nweb crashes",
        "next_steps": "1. fix\n```sh\n# not a heading\n```",
        "other": None,
    }
    plain = await llm(scenario_name, [{"role": "user", "content": "x"}], response_format={"type": "json_object"})
    assert json.loads(plain.content) == {
        "Alert Explanation": "> note\n\nweb crashes",
        "Next Steps": "1. fix\n```sh\n# not a heading\n```",
    }


async def test_structured_output_fields_take_the_schemas_types(llm, model_server, scenario_name) -> None:
    # as a provider with structured output answers: a boolean is never the string "false"
    model_server.add_scenario(
        {"name": scenario_name, "steps": ["# Healthy\n**false**\n# Replicas\n3\n# Ratio\n0.5\n# Note\nmaybe"]}
    )
    properties = {
        "healthy": {"type": "boolean"},
        "replicas": {"type": "integer"},
        "ratio": {"type": "number"},
        "note": {"type": "boolean"},
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "T", "schema": {"properties": properties}}}
    turn = await llm(scenario_name, [{"role": "user", "content": "x"}], response_format=response_format)
    # a word that is no boolean stays text (the client's check then says so)
    assert json.loads(turn.content) == {"healthy": False, "replicas": 3, "ratio": 0.5, "note": "maybe"}


def test_scenarios_load_from_yaml_json_and_dicts(tmp_path: Path) -> None:
    data = {
        "name": "from-file",
        "steps": ["hello", {"tool_calls": [{"name": "kubectl_events", "arguments": '{"a": 1}'}]}],
        "rules": [{"when": {"last_user_contains": "x"}, "respond": "y"}],
    }
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "many.yaml").write_text(yaml.safe_dump({"scenarios": [data, {**data, "name": "second"}]}))
    (tmp_path / "list.json").write_text(json.dumps([data]))
    assert [s.name for s in load_scenarios(tmp_path / "one.yaml")] == ["from-file"]
    assert [s.name for s in load_scenarios(tmp_path / "many.yaml")] == ["from-file", "second"]
    [loaded] = load_scenarios(tmp_path / "list.json")
    assert loaded == Scenario.model_validate(data)
    assert loaded.steps[0].content == "hello"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"name": "x", "steps": [{"contnet": "typo"}]}, "contnet"),
        ({"name": "x", "steps": []}, "neither steps nor rules"),
        ({"name": "x", "steps": ["{{ unclosed"]}, "template syntax error"),
        ({"name": "x", "rules": [{"when": {"last_user_contains": "("}, "respond": "y"}]}, "bad regular expression"),
        ({"name": "x", "rules": [{"when": {}, "respond": "y"}]}, "at least one condition"),
        ({"name": "x", "steps": [{"content": "y", "fault": {"kind": "malformed_tool_json"}}]}, "needs tool_calls"),
        ({"name": "x", "steps": [{"fault": {"kind": "explode"}}]}, "kind"),
        ({"name": "has space", "steps": ["y"]}, "whitespace"),
    ],
)
def test_invalid_scenarios_are_rejected(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scenario.model_validate(bad)


def test_bad_scenario_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nsteps: [\n")
    with pytest.raises(ValueError, match="broken.yaml"):
        load_scenarios(path)
