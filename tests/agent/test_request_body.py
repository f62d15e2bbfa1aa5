"""The OpenAI SDK's walk of a chat request's body is skipped only where it changes nothing
(`operator/agent/request_body.py`, issue #23): the body sent is the one the walk would make."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pydantic
from kubernetes import client as k8s
from openai import omit
from openai._utils import PropertyInfo, async_maybe_transform
from openai.resources.chat.completions import completions
from openai.types.beta.response_create_params import ResponseCreateParamsBase
from openai.types.chat import completion_create_params

from lestrade.operator.agent import model as model_mod
from lestrade.operator.agent.request_body import install, needs_walk
from lestrade.operator.tools import default_registry

CHAT = completion_create_params.CompletionCreateParamsNonStreaming


class Inner(TypedDict, total=False):
    card_id: Annotated[str, PropertyInfo(alias="cardID")]


class Outer(TypedDict, total=False):
    items: list[int | Inner]


def _body() -> dict[str, Any]:
    tools = default_registry(k8s.ApiClient(k8s.Configuration())).schemas()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a troubleshooter."},
        {"role": "user", "content": [{"type": "text", "text": "Why does web-1 restart?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "kubectl_logs", "arguments": '{"name": "web-1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "OOMKilled", "cache_control": {"type": "ephemeral"}},
    ]
    return {"messages": messages, "model": "gpt-4o", "tools": tools, "max_tokens": 512, "n": omit, "audio": omit}


async def test_the_operator_sends_chat_bodies_unwalked_and_as_the_walk_would_make_them() -> None:
    await model_mod._load()  # what every model call does first: installs the skip
    body = _body()
    sent = await completions.async_maybe_transform(body, CHAT)
    assert sent == await async_maybe_transform(body, CHAT)  # the SDK's own walk
    assert "n" not in sent and "audio" not in sent  # parameters not given are still dropped
    assert sent["messages"] is body["messages"] and sent["tools"] is body["tools"]  # not walked


async def test_types_with_an_alias_or_a_format_and_bodies_that_are_not_plain_json_keep_the_walk() -> None:
    install()
    assert not needs_walk(CHAT)
    assert needs_walk(ResponseCreateParamsBase)  # `betas` is sent as `openai-beta`

    assert needs_walk(Outer)  # however deep
    assert await completions.async_maybe_transform({"items": [{"card_id": "x"}]}, Outer) == {"items": [{"cardID": "x"}]}

    class Part(pydantic.BaseModel):
        type: str = "text"
        text: str

    body = {"messages": [{"role": "user", "content": [Part(text="hi")]}], "model": "gpt-4o"}
    sent = await completions.async_maybe_transform(body, CHAT)
    assert sent == await async_maybe_transform(body, CHAT)
    assert sent["messages"][0]["content"] == [{"text": "hi"}]  # the model dumped by the walk
