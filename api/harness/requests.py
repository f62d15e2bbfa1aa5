"""The bodies of reference 003's `POST /chat` and `POST /chat/relay/:relayId`, checked.

Errors are `HarnessError(status, message)`, answered as `{"error": message}` (003's shape).
A client's `messages` are OpenAI-format: the last user message is the ask; the ones before it
go along as quoted text only (never as messages the model takes as its own: a client cannot
forge tool calls or their results into the session).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from lestrade.config import ConfigError, ModelList
from lestrade.resources.conversation import MAX_ASK_LENGTH, HarnessSettings, Permissions

__all__ = [
    "HarnessError",
    "ChatRequest",
    "RelayAnswer",
    "parse_chat",
    "parse_relay",
    "INVALID_JSON",
    "CHAT_REQUIRED",
    "RELAY_REQUIRED",
]

INVALID_JSON = "Invalid JSON body"
CHAT_REQUIRED = "model and messages are required"
RELAY_REQUIRED = "sessionId and response are required"
HISTORY_LIMIT = 12000
"""Characters of earlier messages quoted into the ask."""


class HarnessError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ChatRequest:
    model: str | None
    ask: str
    system_prompt: str | None
    harness: HarnessSettings


@dataclass(frozen=True)
class RelayAnswer:
    session_id: str
    approved: bool
    always: bool
    reason: str | None


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HarnessError(400, INVALID_JSON) from None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _ask(messages: list[Any]) -> str:
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise HarnessError(400, "messages: each message needs a role (system, user, assistant or tool)")
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is None:
        raise HarnessError(400, "messages: at least one user message is required")
    ask = _text(messages[last_user].get("content")).strip()
    if not ask:
        raise HarnessError(400, f"messages[{last_user}].content: the question is empty")
    earlier = [m for m in messages[:last_user] if m["role"] in ("system", "user", "assistant", "tool")]
    if earlier:
        quoted = "\n".join(f"{m['role']}: {_text(m.get('content'))}" for m in earlier)[-HISTORY_LIMIT:]
        ask = (
            "Earlier conversation, as the client sent it (not verified by the server; for "
            f"context only):\n{quoted}\n\nThe question now:\n{ask}"
        )
    if len(ask) > MAX_ASK_LENGTH:
        raise HarnessError(400, f"messages: the question is longer than {MAX_ASK_LENGTH} characters")
    return ask


def _int(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise HarnessError(400, f"{key}: must be an integer from {low} to {high}")
    return value


def parse_chat(raw: bytes, models: ModelList) -> ChatRequest:
    body = _json(raw)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise HarnessError(400, CHAT_REQUIRED)
    model = body.get("model")
    if model is None and models.default_name is None:
        raise HarnessError(400, CHAT_REQUIRED)
    if model is not None:
        if not isinstance(model, str) or not model:
            raise HarnessError(400, CHAT_REQUIRED)
        try:
            models.resolve(model)
        except ConfigError as exc:
            raise HarnessError(400, str(exc)) from None
    mode = body.get("mode") or "agent"
    if mode not in ("agent", "rlm"):
        raise HarnessError(400, f"mode: must be agent or rlm, not {mode!r}")
    system_prompt = body.get("systemPrompt")
    if system_prompt is not None and (not isinstance(system_prompt, str) or len(system_prompt) > 16384):
        raise HarnessError(400, "systemPrompt: must be a string of at most 16384 characters")
    try:
        permissions = Permissions.model_validate(body.get("permissions") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("permissions", *first["loc"]))
        raise HarnessError(400, f"{where}: {first['msg']}") from None
    harness = HarnessSettings(
        mode=mode,  # type: ignore[arg-type]  # checked above: agent or rlm
        permissions=permissions,
        max_iterations=_int(body, "maxIterations", 10, 1, 200),
        max_depth=_int(body, "maxDepth", 2, 0, 5),
    )
    return ChatRequest(model, _ask(body["messages"]), system_prompt or None, harness)


def parse_relay(raw: bytes) -> RelayAnswer:
    body = _json(raw)
    response = body.get("response") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("sessionId"), str)
        or not body["sessionId"]
        or not isinstance(response, dict)
    ):
        raise HarnessError(400, RELAY_REQUIRED)
    if not isinstance(response.get("approved"), bool):
        raise HarnessError(400, "response.approved: must be true or false")
    always = response.get("always", False)
    reason = response.get("reason")
    if not isinstance(always, bool):
        raise HarnessError(400, "response.always: must be true or false")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 4096):
        raise HarnessError(400, "response.reason: must be a string of at most 4096 characters")
    # 003: the reason goes with a denial (ignored when approved).
    return RelayAnswer(
        body["sessionId"], response["approved"], always, None if response["approved"] else reason or None
    )
