"""Prompt sections, their switches (ENABLED_PROMPTS over behavior_controls over defaults), the
investigation prompt, and the first-call token budget."""

from __future__ import annotations

from datetime import UTC, datetime

from agent_support import FakeTool, collect, final, registry
from representative_tools import representative_registry

from lestrade.operator.agent import (
    DEFAULT_SECTIONS,
    SECTION_KEYS,
    InvestigationRequest,
    PromptConfig,
    enabled_sections,
    first_call_tokens,
    prompt_text,
    system_prompt,
    user_prompt,
)
from lestrade.operator.base.settings import OperatorSettings

ALL_ON_BY_DEFAULT = set(SECTION_KEYS) - {"ai_safety"}


def test_defaults_are_every_section_but_ai_safety() -> None:
    assert enabled_sections() == ALL_ON_BY_DEFAULT
    assert enabled_sections({"ai_safety": True}) == set(SECTION_KEYS)


def test_behavior_controls_switch_sections_off() -> None:
    on = enabled_sections({"todowrite_instructions": False, "style_guide": False}, "")
    assert on == ALL_ON_BY_DEFAULT - {"todowrite_instructions", "style_guide"}


def test_enabled_prompts_env_restricts_and_cannot_be_overridden() -> None:
    listed = OperatorSettings.from_env({"ENABLED_PROMPTS": " files, ai_safety ,toolset_instructions"}).enabled_prompts
    controls = {"style_guide": True, "ai_safety": True, "files": False}
    assert enabled_sections(controls, listed) == {"ai_safety", "toolset_instructions"}
    # Listed in the env but off by default: the env allows, it does not switch on.
    assert enabled_sections({}, listed) == {"files", "toolset_instructions"}
    none = OperatorSettings.from_env({"ENABLED_PROMPTS": "none"}).enabled_prompts
    assert enabled_sections({"intro": True}, none) == frozenset()


def test_system_prompt_contains_exactly_the_enabled_sections() -> None:
    tools = registry(FakeTool("TodoWrite"), instructions="Use fake tools wisely.")
    full = system_prompt(tools, PromptConfig(enabled_prompts="", cluster_name="prod-eu"))
    for snippet in (
        prompt_text.INTRO,
        prompt_text.TODOWRITE_INSTRUCTIONS,
        "Use fake tools wisely.",
        prompt_text.PERMISSION_ERRORS,
        "`prod-eu`",
    ):
        assert snippet in full
    assert prompt_text.AI_SAFETY not in full
    lean = system_prompt(
        tools,
        PromptConfig(
            enabled_prompts="intro,toolset_instructions,ai_safety,cluster_name",
            behavior_controls={"ai_safety": True, "cluster_name": False},
            cluster_name="prod-eu",
        ),
    )
    assert lean == "\n\n".join([prompt_text.INTRO, prompt_text.AI_SAFETY, "Use fake tools wisely."])


def test_sections_with_nothing_to_say_are_left_out() -> None:
    text = system_prompt(registry(FakeTool("echo")), PromptConfig(enabled_prompts=""))
    assert prompt_text.TODOWRITE_INSTRUCTIONS not in text  # no TodoWrite tool
    assert "connected to the Kubernetes cluster" not in text  # no cluster name configured


def test_user_prompt_sections() -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    config = PromptConfig(
        enabled_prompts="",
        files=[("values.yaml", "replicas: 3")],
        runbooks=["If OOMKilled, raise the memory limit."],
        custom_instructions="Prefer Prometheus.",
        now=now,
    )
    tools = registry(FakeTool("TodoWrite"))
    text = user_prompt("why?", tools, config)
    assert text.startswith("why?")
    for snippet in (
        '<file name="values.yaml">\nreplicas: 3\n</file>',
        prompt_text.TODOWRITE_REMINDER,
        "Current time: 2025-01-02T03:04:05Z",
        "If OOMKilled, raise the memory limit.",
        "Prefer Prometheus.",
    ):
        assert snippet in text
    off = PromptConfig(
        enabled_prompts="",
        behavior_controls={"files": False, "todowrite_reminder": False, "time_runbooks": False},
        files=[("values.yaml", "replicas: 3")],
        runbooks=["x"],
    )
    assert user_prompt("why?", tools, off) == "why?"


def test_investigation_prompt_asks_for_the_sections() -> None:
    request = InvestigationRequest(
        title="KubePodCrashLooping",
        description="Pod web-1 restarts",
        subject={"name": "web-1", "namespace": "shop", "kind": "Pod"},
        context={"labels": {"severity": "warning"}},
        question="Is it the new release?",
    )
    text = user_prompt(request, registry(), PromptConfig(enabled_prompts="none", sections=DEFAULT_SECTIONS))
    assert text.startswith("Investigate this kubernetes issue: KubePodCrashLooping")
    assert "name: web-1\nnamespace: shop\nkind: Pod" in text
    assert "severity: warning" in text and "Question: Is it the new release?" in text
    for title in DEFAULT_SECTIONS:
        assert f"- {title}: " in text
    assert "```json" in text


def test_first_call_fits_the_budget_with_a_representative_toolset() -> None:
    tokens = first_call_tokens(representative_registry(), PromptConfig(enabled_prompts=""))
    assert 500 < tokens <= 5_000


def test_first_call_fits_the_budget_with_the_default_toolset() -> None:
    """Every default prompt section on (ENABLED_PROMPTS unset), Prometheus configured (it adds
    tools), approvals' write tools off as they are by default."""
    from kubernetes.client import ApiClient  # building the tools does not connect

    from lestrade.operator.tools import default_registry

    with ApiClient() as client:
        registry_ = default_registry(client, prometheus_url="http://127.0.0.1:9")
    assert len(registry_.enabled_tools()) >= 15
    # 3,400 before #23 cut it; most of the cut is the toolsets offered only once opened.
    assert first_call_tokens(registry_, PromptConfig(enabled_prompts="")) <= 1_500


async def test_the_model_receives_the_switched_prompt(harness) -> None:
    harness.scenario(steps=[{"content": "ok"}])
    prompt = PromptConfig(enabled_prompts="", behavior_controls={"style_guide": False, "general_instructions": False})
    agent = harness.agent(registry(FakeTool("echo")), prompt)
    events = await collect(agent.run(agent.initial_messages("list pods")))
    assert final(events).text == "ok"
    system = harness.requests()[0]["messages"][0]
    assert system["role"] == "system"
    assert prompt_text.INTRO in system["content"]
    assert prompt_text.STYLE_GUIDE not in system["content"]
    assert prompt_text.GENERAL_INSTRUCTIONS not in system["content"]
