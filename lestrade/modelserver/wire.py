"""The OpenAI chat-completions wire format: responses, stream chunks, usage, errors.

Clients under test (litellm over the openai SDK) must not be able to tell this server from a
real provider, so responses follow the shapes those clients parse: tool calls streamed as
indexed deltas (id and name first, then argument fragments), a final chunk with the finish
reason, and a usage-only chunk when `stream_options.include_usage` asks for one.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from lestrade.modelserver.conversation import message_text
from lestrade.modelserver.scenario import Usage
from lestrade.modelserver.script import Reply

__all__ = [
    "apply_response_format",
    "completion",
    "count_tokens",
    "error_body",
    "stream_chunks",
    "usage_for",
]

CONTENT_CHUNK_CHARS = 24
ARGUMENT_CHUNK_CHARS = 16


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import tiktoken  # needs TIKTOKEN_CACHE_DIR, which `import lestrade` sets

    return tiktoken.get_encoding("cl100k_base")


@lru_cache(maxsize=4096)
def count_tokens(text: str) -> int:
    """cl100k tokens of `text`, remembered: each request of a conversation repeats the earlier
    messages and the tool schemas (this server stands in for a remote provider, so its CPU
    should go to the runs under test, not to counting the same text again)."""
    return len(_encoding().encode(text, disallowed_special=())) if text else 0


def _prompt_tokens(body: dict[str, Any]) -> int:
    # Roughly what OpenAI bills: a few tokens of framing per message plus its text.
    total = 3
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        total += 4 + count_tokens(message_text(message.get("content")))
        if message.get("tool_calls"):
            total += count_tokens(json.dumps(message["tool_calls"]))
    if body.get("tools"):
        total += count_tokens(json.dumps(body["tools"]))
    return total


def usage_for(body: dict[str, Any], reply: Reply, override: Usage | None) -> dict[str, Any]:
    prompt = _prompt_tokens(body)
    completion_tokens = count_tokens(reply.content or "") + count_tokens(reply.reasoning or "")
    for call in reply.tool_calls:
        completion_tokens += count_tokens(call.name) + count_tokens(call.arguments)
    if override is not None:
        prompt = override.prompt_tokens if override.prompt_tokens is not None else prompt
        if override.completion_tokens is not None:
            completion_tokens = override.completion_tokens
    total = prompt + completion_tokens
    if override is not None and override.total_tokens is not None:
        total = override.total_tokens
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": total}
    if override is not None and override.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": min(override.cached_tokens, prompt)}
    return usage


def _tool_call_json(call: Any) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def completion(reply: Reply, *, model: str, response_id: str, usage: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [_tool_call_json(c) for c in reply.tool_calls]
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": usage,
    }


def _pieces(text: str, size: int) -> list[str]:
    """Splits text into chunks of about `size` characters, at word ends where possible."""
    words = re.findall(r"\S*\s*", text)
    pieces, current = [], ""
    for word in words:
        if current and len(current) + len(word) > size:
            pieces.append(current)
            current = ""
        current += word
    if current:
        pieces.append(current)
    return pieces


def stream_chunks(
    reply: Reply, *, model: str, response_id: str, usage: dict[str, Any] | None
) -> Iterator[dict[str, Any]]:
    """The `chat.completion.chunk` objects of a streamed answer, in order (without [DONE])."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.reasoning or "", CONTENT_CHUNK_CHARS):
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(reply.content or "", CONTENT_CHUNK_CHARS):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        arguments = call.arguments
        for start in range(0, len(arguments), ARGUMENT_CHUNK_CHARS):
            piece = arguments[start : start + ARGUMENT_CHUNK_CHARS]
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, reply.finish_reason)
    if usage is not None:
        yield {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _normal(title: str) -> str:
    return re.sub(r"[^a-z0-9]", "", title.lower())


def apply_response_format(content: str | None, response_format: Any) -> str | None:
    """Answers a structured-output request as a model would: with JSON, not markdown.

    Content that already is JSON is left alone. Otherwise the markdown's `#` sections become
    the object's fields — the schema's properties when it names them (matched to headings
    ignoring case and punctuation, null when absent), else the headings themselves — and text
    before the first heading is kept at the start of the first filled field. A field the schema
    types as boolean, integer or number gets that type when its text reads as one (a provider
    with structured output never answers `"false"` for a boolean).
    """
    if content is None or not isinstance(response_format, dict):
        return content
    if response_format.get("type") not in ("json_schema", "json_object"):
        return content
    try:
        json.loads(content)
        return content
    except ValueError:
        pass
    preamble, sections = _sections(content)
    schema = (response_format.get("json_schema") or {}).get("schema") or {}
    keys = list(schema.get("properties") or {}) or [title for title, _ in sections] or ["content"]
    by_title = {_normal(title): body for title, body in sections}
    result: dict[str, str | None] = {key: by_title.get(_normal(key)) for key in keys}
    if preamble:
        first = next((key for key in keys if result[key] is not None), keys[0])
        result[first] = f"{preamble}\n\n{result[first] or ''}".strip()
    properties = schema.get("properties") or {}
    return json.dumps({key: _typed(value, properties.get(key) or {}) for key, value in result.items()})


def _typed(value: str | None, schema: dict[str, Any]) -> Any:
    """`value` as the JSON type `schema` names, when it reads as one; else unchanged."""
    if value is None:
        return None
    word = value.strip().strip("*`'\".").strip().lower()
    kind = schema.get("type")
    if kind == "boolean" and word in ("true", "false"):
        return word == "true"
    if kind in ("integer", "number"):
        try:
            number = float(word)
        except ValueError:
            return value
        return int(number) if kind == "integer" and number.is_integer() else number
    return value


def _sections(content: str) -> tuple[str, list[tuple[str, str | None]]]:
    """(text before the first heading, [(heading, body)]); `#` lines in code fences are text."""
    preamble: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in content.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        heading = None if in_fence else re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if heading:
            sections.append((heading.group(1), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            preamble.append(line)
    return "\n".join(preamble).strip(), [(t, "\n".join(b).strip() or None) for t, b in sections]
