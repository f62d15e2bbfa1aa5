"""The operator's side of the REPL's pipe: length-prefixed JSON, and distrust of every frame.

Everything the REPL sends is written by model code that may be hostile (it can import the
REPL's own module and write raw frames), so each frame is size-capped before it is read,
parsed strictly, and checked against the few shapes the REPL may send. A frame that fails is a
`ProtocolError`: the caller ends the REPL rather than guessing.
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass
from typing import Any

__all__ = ["ProtocolError", "CallRequest", "ExecReply", "read_frame", "encode_frame", "parse_message"]

_NAME_MAX = 200


class ProtocolError(Exception):
    """The REPL sent something it may not: the REPL is ended."""


@dataclass(frozen=True)
class CallRequest:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ExecReply:
    stdout: str
    stderr: str
    error: str | None
    final: str | None
    truncated: bool
    exec_id: int | None


def encode_frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, ensure_ascii=False).encode("utf-8", "replace")
    return struct.pack(">I", len(data)) + data


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> dict[str, Any]:
    """One frame; `asyncio.IncompleteReadError` when the REPL is gone."""
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    if length > max_bytes:
        raise ProtocolError(f"a message of {length} bytes (the limit is {max_bytes})")
    data = await reader.readexactly(length)
    try:
        message = json.loads(data)
        # lone surrogates (legal as JSON escapes) would fail when the text is sent on as UTF-8
        message = json.loads(json.dumps(message, ensure_ascii=False).encode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:  # not JSON, nested too deep, a 5,000-digit number
        raise ProtocolError(f"a message that is not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message that is not a JSON object")
    return message


def _text(message: dict[str, Any], field: str, *, optional: bool = False) -> str | None:
    value = message.get(field)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"{message.get('type')!r} message: {field!r} must be a string")
    return value


def parse_message(message: dict[str, Any]) -> CallRequest | ExecReply | str:
    """A call, a result, or "ready"; anything else is a ProtocolError."""
    kind = message.get("type")
    if kind == "ready":
        return "ready"
    if kind == "call":
        name = _text(message, "name") or ""
        args = message.get("args", {})
        if len(name) > _NAME_MAX or not name.isidentifier():
            raise ProtocolError("'call' message: 'name' is not a function name")
        if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
            raise ProtocolError("'call' message: 'args' must be an object")
        return CallRequest(name, args)
    if kind == "result":
        exec_id = message.get("id")
        if exec_id is not None and (not isinstance(exec_id, int) or isinstance(exec_id, bool)):
            raise ProtocolError("'result' message: 'id' must be an integer")
        return ExecReply(
            stdout=_text(message, "stdout") or "",
            stderr=_text(message, "stderr") or "",
            error=_text(message, "error", optional=True),
            final=_text(message, "final", optional=True),
            truncated=message.get("truncated") is True,
            exec_id=exec_id,
        )
    raise ProtocolError(f"unknown message type {str(kind)[:40]!r}")
