"""Injected faults as litellm's real client sees them, and recovery after `times`."""

from __future__ import annotations

import asyncio
import json
import time

import litellm
import pytest

from lestrade.modelserver import ScriptedModelServer

USER = [{"role": "user", "content": "check the shop namespace"}]
CALL = {"name": "kubectl_describe", "arguments": {"kind": "pod", "name": "web"}}


async def test_rate_limit_raises_with_retry_after(llm, model_server: ScriptedModelServer, scenario_name: str) -> None:
    model_server.add_scenario(
        {"name": scenario_name, "steps": [{"content": "ok", "fault": {"kind": "rate_limit", "retry_after": 7}}]}
    )
    with pytest.raises(litellm.RateLimitError) as caught:
        await llm(scenario_name, USER)
    assert caught.value.status_code == 429
    # litellm swaps `response` for a synthetic one; the provider's headers are kept here:
    assert caught.value.litellm_response_headers["retry-after"] == "7"
    assert len(model_server.requests(scenario_name)) == 1  # no silent retry


def test_server_error_raises_sync(model_server: ScriptedModelServer, scenario_name: str) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": [{"content": "ok", "fault": {"kind": "server_error"}}]})
    with pytest.raises(litellm.InternalServerError) as caught:
        litellm.completion(messages=USER, num_retries=0, max_retries=0, **model_server.litellm_params(scenario_name))
    assert caught.value.status_code == 500


@pytest.mark.parametrize("stream", [False, True])
async def test_server_error_raises_when_streaming_too(llm, model_server, scenario_name, stream) -> None:
    model_server.add_scenario({"name": scenario_name, "steps": [{"content": "ok", "fault": {"kind": "server_error"}}]})
    with pytest.raises(litellm.InternalServerError):
        await llm(scenario_name, USER, stream=stream)


async def test_hang_times_out_on_the_client_and_the_server_keeps_serving(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {"name": scenario_name, "steps": [{"content": "finally", "fault": {"kind": "hang", "times": 1}}]}
    )
    started = time.monotonic()
    with pytest.raises(litellm.Timeout):
        await llm(scenario_name, USER, timeout=1)
    assert 1 <= time.monotonic() - started < 10
    assert (await llm(scenario_name, USER, timeout=5)).content == "finally"


def test_stop_releases_a_hanging_request() -> None:
    server = ScriptedModelServer([{"name": "stuck", "steps": [{"content": "x", "fault": {"kind": "hang"}}]}]).start()
    errors: list[BaseException] = []

    async def call() -> None:
        try:
            await litellm.acompletion(
                messages=USER, timeout=30, num_retries=0, max_retries=0, **server.litellm_params("stuck")
            )
        except Exception as exc:  # noqa: BLE001  (any error will do; a hang would not end)
            errors.append(exc)

    async def main() -> None:
        task = asyncio.create_task(call())
        deadline = time.monotonic() + 10
        while not server.requests("stuck"):  # the request is in and hanging
            assert time.monotonic() < deadline, "request never reached the server"
            await asyncio.sleep(0.02)
        started = time.monotonic()
        await asyncio.to_thread(server.stop)
        await asyncio.wait_for(task, 10)
        assert time.monotonic() - started < 8

    asyncio.run(main())
    assert errors and not isinstance(errors[0], litellm.Timeout)


@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_tool_json_arrives_unparseable(llm, model_server, scenario_name, stream) -> None:
    model_server.add_scenario(
        {"name": scenario_name, "steps": [{"tool_calls": [CALL], "fault": {"kind": "malformed_tool_json", "times": 1}}]}
    )
    [call] = (await llm(scenario_name, USER, stream=stream)).tool_calls
    assert call["name"] == "kubectl_describe"
    with pytest.raises(json.JSONDecodeError):
        json.loads(call["arguments"])
    [again] = (await llm(scenario_name, USER, stream=stream)).tool_calls
    assert json.loads(again["arguments"]) == CALL["arguments"]


async def test_raw_string_arguments_are_sent_verbatim(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {"name": scenario_name, "steps": [{"tool_calls": [{"name": "bash", "arguments": '{"command": "ls'}]}]}
    )
    [call] = (await llm(scenario_name, USER, stream=True)).tool_calls
    assert call["arguments"] == '{"command": "ls'


async def test_fault_times_then_recovery_per_conversation(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {
            "name": scenario_name,
            "steps": [
                {"content": "step zero"},
                {"content": "step one", "fault": {"kind": "rate_limit", "times": 2, "retry_after": 1}},
            ],
        }
    )

    def at_step_one(question: str) -> list[dict[str, str]]:
        return [
            {"role": "user", "content": question},
            {"role": "assistant", "content": "step zero"},
            {"role": "user", "content": "go on"},
        ]

    first, second = at_step_one("conversation A"), at_step_one("conversation B")
    assert (await llm(scenario_name, first[:1])).content == "step zero"  # step 0 has no fault
    for _ in range(2):
        with pytest.raises(litellm.RateLimitError):
            await llm(scenario_name, first)
    assert (await llm(scenario_name, first)).content == "step one"
    assert (await llm(scenario_name, first)).content == "step one"
    # another conversation has its own counter
    with pytest.raises(litellm.RateLimitError):
        await llm(scenario_name, second)
    # re-adding the scenario resets the counters
    model_server.add_scenario(model_server.scenario(scenario_name))
    with pytest.raises(litellm.RateLimitError):
        await llm(scenario_name, first)


async def test_fault_in_a_rule(llm, model_server, scenario_name) -> None:
    model_server.add_scenario(
        {
            "name": scenario_name,
            "steps": ["normal"],
            "rules": [
                {
                    "when": {"last_user_contains": "summari[sz]e"},
                    "respond": {"content": "summary", "fault": {"kind": "server_error", "times": 1}},
                }
            ],
        }
    )
    ask = [{"role": "user", "content": "please summarize the conversation"}]
    with pytest.raises(litellm.InternalServerError):
        await llm(scenario_name, ask)
    assert (await llm(scenario_name, ask)).content == "summary"
