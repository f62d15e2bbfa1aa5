"""The OpenAI SDK's walk of a chat request's body, skipped where it cannot change anything.

The OpenAI SDK (litellm's client for OpenAI and every OpenAI-compatible server) walks each
request body against its parameter types before sending it (`async_maybe_transform`): to rename
aliased keys, format dates and files, dump pydantic models and drop the parameters not given.
Chat-completion parameters have no alias and no format, yet the walk tries every message
against each of the seven message types and goes through every tool schema: 5-10 ms of the
event loop per model call, and the body comes out unchanged. In a burst of 200 runs (issue #23)
that was more of the operator's CPU than anything else it does per call.

`install()` replaces the walk, for the chat completions only, by: drop the parameters not given,
and send the rest as they are — when the parameter type carries no alias or format anywhere
(checked once per type on the installed SDK, so an SDK that adds one gets its walk back) and the
values are plain JSON (dicts with string keys, lists, strings, numbers, booleans, None). Any
other body goes through the SDK's own walk.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Coroutine
from typing import Any

import typing_extensions

__all__ = ["install", "needs_walk", "plain_json"]

_MARK = "_lestrade_skips_plain_json"
_verdicts: dict[Any, bool] = {}


def needs_walk(expected_type: Any) -> bool:
    """Whether the SDK's walk could change a body of this type: an alias or a format on any
    field, however deep (cached per type)."""
    verdict = _verdicts.get(expected_type)
    if verdict is None:
        try:
            verdict = _has_transforms(expected_type, set())
        except Exception:  # a type this check cannot read: the SDK walks it, as it always did
            verdict = True
        _verdicts[expected_type] = verdict
    return verdict


def _has_transforms(tp: Any, seen: set[int]) -> bool:
    from openai._utils._transform import PropertyInfo  # noqa: PLC0415 (imported with litellm, in a thread)

    if id(tp) in seen:
        return False
    seen.add(id(tp))
    origin = typing_extensions.get_origin(tp)
    if origin is typing_extensions.Annotated:
        args = typing_extensions.get_args(tp)
        for meta in args[1:]:
            if isinstance(meta, PropertyInfo) and (meta.alias is not None or meta.format is not None):
                return True
        return _has_transforms(args[0], seen)
    if origin is typing.Literal or origin is typing_extensions.Literal:
        return False
    if typing_extensions.is_typeddict(tp):
        hints = typing_extensions.get_type_hints(tp, include_extras=True)
        return any(_has_transforms(hint, seen) for hint in hints.values())
    return any(_has_transforms(arg, seen) for arg in typing_extensions.get_args(tp))


def plain_json(value: Any) -> bool:
    """Dicts with string keys, lists, strings, numbers, booleans and None, all the way down."""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, (str, int, float)):
            continue
        if isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return False
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            return False
    return True


def _skipping(
    original: Callable[[Any, Any], Coroutine[Any, Any, Any]],
) -> Callable[[Any, Any], Coroutine[Any, Any, Any]]:
    from openai._utils import is_given  # noqa: PLC0415

    async def transform(data: Any, expected_type: Any) -> Any:
        if isinstance(data, dict) and not needs_walk(expected_type):
            given = {key: value for key, value in data.items() if is_given(value)}
            if plain_json(given):
                return given
        return await original(data, expected_type)

    setattr(transform, _MARK, True)
    return transform


def install() -> None:
    """Makes the chat completions of the OpenAI SDK skip the walk for plain bodies (once)."""
    from openai.resources.chat.completions import completions  # noqa: PLC0415

    walk = getattr(completions, "async_maybe_transform", None)
    if walk is None:  # an SDK that moved its walk: keep it as it is (tests/agent/test_request_body.py fails)
        return
    if not getattr(walk, _MARK, False):
        setattr(completions, "async_maybe_transform", _skipping(walk))  # noqa: B010
