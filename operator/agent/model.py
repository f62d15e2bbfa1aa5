"""One model call over `litellm.acompletion`, with our own bounded, observable retries.

litellm and the OpenAI client can retry on their own; we switch that off (`num_retries=0`) so
every attempt is ours: counted, bounded by `Limits.max_retries`, delayed by exponential backoff
or the server's `Retry-After`, announced as a `ModelRetry` event, and cut short by the run's
deadline. Errors that retrying cannot fix (bad request, authentication) fail at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lestrade.operator.agent import request_body
from lestrade.operator.agent.events import ModelRetry
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.tracing import fail, tracer


def _lib() -> Any:
    """litellm, once `_load()` has imported it.

    Imported on the first model call, not with this module: importing litellm takes seconds
    and ~90 MiB, which an operator waiting for work, the API and the Job entrypoint's argument
    checks should not pay for (`bench/burst_bench.py` prints start time and idle RSS)."""
    import litellm

    return litellm


_loaded = threading.Event()


MODEL_CLIENT_MODULES = ("litellm", "openai.resources")
"""What a process's first model call imports: litellm, and the OpenAI client's resources and
types (~460 modules, 0.5 s of CPU, which litellm's first real call imported in the event loop:
a call with `mock_response`, as the warm-up makes, builds no client). `__main__.py` starts the
same imports in a thread before anything else."""


def _import() -> None:
    litellm = importlib.import_module("litellm")
    for name in MODEL_CLIENT_MODULES[1:]:
        importlib.import_module(name)
    litellm.suppress_debug_info = True  # type: ignore[attr-defined] # no "Give Feedback" banner in the operator's logs per error
    # The OpenAI SDK imports its resources (chat, ...) at a client's first `.chat`: in the event
    # loop, where a burst's first calls all waited for it (seconds on a busy machine). Here, in
    # the import's thread, instead.
    importlib.import_module("openai.resources")
    request_body.install()  # the SDK's per-call walk of an unchanged body, skipped
    _loaded.set()


_importing: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}


async def _load() -> None:
    """Imports litellm in a thread the first time, so the event loop (other runs, watches)
    is not blocked for the seconds it takes; `LITELLM_LOCAL_MODEL_COST_MAP` is already set by
    `lestrade/__init__.py`, which every import of this package runs first.

    Concurrent first calls share one import: a burst of runs used to queue one thread job each,
    every one of them blocked on Python's import lock, and so filled the loop's default
    executor — the tools' identity and the redaction waited behind them for the whole import."""
    if _loaded.is_set():
        return
    loop = asyncio.get_running_loop()
    pending = _importing.get(loop)
    if pending is None:
        pending = _importing[loop] = asyncio.ensure_future(asyncio.to_thread(_import))
        pending.add_done_callback(lambda _: _importing.pop(loop, None))
    await asyncio.shield(pending)


load_litellm = _load
"""For callers that use litellm synchronously (the Agent's constructor reads the model's
context window): awaited first, so the event loop never imports litellm itself (which blocked
it for the whole import — seconds, 20 s on a starved machine — and made shared replicas miss
their lease renewals)."""

__all__ = [
    "MODEL_CLIENT_MODULES",
    "load_litellm",
    "RawToolCall",
    "ModelReply",
    "ModelCallError",
    "complete",
    "retry_after_seconds",
    "cached_prompt_tokens",
    "wants_cache_breakpoints",
    "with_cache_breakpoints",
]


@dataclass(frozen=True)
class RawToolCall:
    """A tool call as the model sent it; `arguments` is the unparsed JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelReply:
    content: str
    tool_calls: list[RawToolCall]
    reasoning: str | None
    usage: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0
    latency: float = 0.0
    """Seconds the answering call took (the failed tries before it not included)."""


class ModelCallError(Exception):
    """The model call failed for good; `reason` is the AgentError reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _header(headers: Any, name: str) -> str | None:
    if not headers:
        return None
    if isinstance(headers, Mapping) and not hasattr(headers, "get_list"):
        headers = {str(k).lower(): v for k, v in headers.items()}
    value = headers.get(name)
    return None if value is None else str(value)


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's requested delay (`retry-after-ms`, `retry-after` seconds or HTTP date)."""
    response = getattr(exc, "response", None)
    sources = (
        getattr(response, "headers", None),
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
    )
    for headers in sources:
        if (ms := _header(headers, "retry-after-ms")) is not None:
            try:
                return max(float(ms) / 1000, 0.0)
            except ValueError:
                pass
        if (value := _header(headers, "retry-after")) is not None:
            try:
                return max(float(value), 0.0)
            except ValueError:
                parsed = email.utils.parsedate_to_datetime(value) if value else None
                if parsed is not None:
                    return max(parsed.timestamp() - time.time(), 0.0)
    return None


def _provider_status(exc: BaseException) -> int | None:
    """The HTTP status the provider really answered, from the deepest error in the chain.

    litellm re-maps provider errors partly by their message text (a 404 whose message happens
    to contain "429" becomes a RateLimitError with status 429), so the status of the original
    error it wraps is the trustworthy one.
    """
    status: int | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "status_code", None)
        if isinstance(code, int):
            status = code
        current = current.__cause__ or current.__context__
    return status


def _classify(exc: BaseException) -> str | None:
    """The retry reason for a retryable error, None for one retrying cannot fix."""
    if isinstance(exc, (_lib().Timeout, TimeoutError)):
        return "ModelTimeout"
    status = _provider_status(exc)
    if status is not None and 400 <= status < 600:
        if status == 429:
            return "RateLimited"
        if status == 408:
            return "ModelTimeout"
        return "ServerError" if status >= 500 else None
    if isinstance(exc, _lib().RateLimitError):
        return "RateLimited"
    if isinstance(
        exc,
        (_lib().InternalServerError, _lib().ServiceUnavailableError, _lib().BadGatewayError),
    ):
        return "ServerError"
    if isinstance(exc, _lib().APIConnectionError):
        return "ConnectionError"
    return None


def cached_prompt_tokens(usage: Any) -> int:
    """The prompt tokens the provider read from its cache: OpenAI's (and Gemini's, and litellm's
    mapping of Anthropic's `cache_read_input_tokens`) `prompt_tokens_details.cached_tokens`."""
    details = getattr(usage, "prompt_tokens_details", None)
    if isinstance(details, Mapping):
        value = details.get("cached_tokens")
    else:
        value = getattr(details, "cached_tokens", None)
    if not value:
        value = getattr(usage, "cache_read_input_tokens", None)
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


# Providers that cache only where the request says so (Anthropic's `cache_control`, also through
# Bedrock and Vertex AI); OpenAI, Azure OpenAI, DeepSeek and Gemini cache a repeated prefix on
# their own, which a stable prefix (system prompt, tool schemas, then history) is all they need.
_EXPLICIT_CACHE_PROVIDERS = ("anthropic/", "bedrock/", "vertex_ai/", "claude")


def wants_cache_breakpoints(model: str) -> bool:
    name = model.lower()
    return "claude" in name and name.startswith(_EXPLICIT_CACHE_PROVIDERS)


def with_cache_breakpoints(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with Anthropic cache breakpoints on the system prompt (which caches the tool
    schemas before it too) and on the last message (the whole history so far, which the next
    call of the run reads back at a tenth of the price). Copies; the stored messages are not
    changed. Two of the four breakpoints Anthropic allows."""
    out = [dict(m) for m in messages]
    marks = [i for i, m in enumerate(out) if m.get("role") == "system"][:1]
    if out and (len(out) - 1) not in marks:
        marks.append(len(out) - 1)
    for index in marks:
        message = out[index]
        content = message.get("content")
        if isinstance(content, str) and content:
            message["content"] = [{"type": "text", "text": content, "cache_control": {"type": "ephemeral"}}]
        elif isinstance(content, list) and content and isinstance(content[-1], Mapping):
            parts = [dict(part) for part in content]
            parts[-1]["cache_control"] = {"type": "ephemeral"}
            message["content"] = parts
    return out


def _reply(response: Any) -> ModelReply:
    message = response.choices[0].message
    calls = [
        RawToolCall(
            id=str(c.id or ""),  # the engine gives calls without an id one of its own
            name=str(c.function.name or ""),
            arguments=c.function.arguments if c.function.arguments is not None else "",
        )
        for c in getattr(message, "tool_calls", None) or []
    ]
    usage = getattr(response, "usage", None)
    counts = {key: int(getattr(usage, key, 0) or 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")}
    counts["cached_tokens"] = cached_prompt_tokens(usage)
    hidden = getattr(response, "_hidden_params", None) or {}
    if "response_cost" in hidden:
        # litellm priced the call already (cached-token prices included), as it returned it;
        # None: a model without pricing. Asking `completion_cost` again costs a lookup of the
        # model's prices per call.
        cost = float(hidden["response_cost"] or 0.0)
    else:
        try:
            cost = float(_lib().completion_cost(completion_response=response) or 0.0)
        except Exception:  # models without pricing (local, scripted) cost nothing we can know
            cost = 0.0
    return ModelReply(
        content=message.content or "",
        tool_calls=calls,
        reasoning=getattr(message, "reasoning_content", None),
        usage=counts,
        cost=cost,
    )


async def complete(
    settings: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int,
    limits: Limits,
    deadline: float | None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str | None = None,
) -> AsyncIterator[ModelRetry | ModelReply]:
    """Yields a `ModelRetry` per failed attempt, then the `ModelReply`; raises ModelCallError.

    `deadline` is a `loop.time()` value for the whole run (None: unbounded). One span covers
    the call with its retries (`tracing.py`): model, tokens, cost, latency, retries.
    """
    model = str(settings.get("model") or "")
    # Not made the current span: this is a generator, and its caller's context moves on
    # between yields; a span started here is a child of the caller's (the run's) span.
    span = tracer().start_span(f"chat {model}".strip())
    span.set_attribute("gen_ai.operation.name", "chat")
    span.set_attribute("gen_ai.request.model", model)
    retries = 0
    try:
        async for item in _complete(
            settings,
            messages,
            max_tokens=max_tokens,
            limits=limits,
            deadline=deadline,
            tools=tools,
            tool_choice=tool_choice,
        ):
            if isinstance(item, ModelRetry):
                retries += 1
            else:
                span.set_attribute("gen_ai.usage.input_tokens", item.usage.get("prompt_tokens", 0))
                span.set_attribute("gen_ai.usage.output_tokens", item.usage.get("completion_tokens", 0))
                span.set_attribute("lestrade.model.cost_usd", float(item.cost))
                span.set_attribute("lestrade.model.latency_s", float(item.latency or 0.0))
            yield item
    except ModelCallError as exc:
        fail(span, exc.reason, str(exc))
        raise
    finally:
        span.set_attribute("lestrade.model.retries", retries)
        span.end()


async def _complete(
    settings: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int,
    limits: Limits,
    deadline: float | None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str | None = None,
) -> AsyncIterator[ModelRetry | ModelReply]:
    loop = asyncio.get_running_loop()
    await _load()
    kwargs: dict[str, Any] = {"drop_params": True, **settings}
    for owned in ("timeout", "max_retries", "stream"):  # ours to set, per attempt
        kwargs.pop(owned, None)
    model = str(kwargs.get("model") or "")
    sent = with_cache_breakpoints(messages) if wants_cache_breakpoints(model) else list(messages)
    kwargs.update(messages=sent, max_tokens=max_tokens, num_retries=0)
    if tools:
        kwargs["tools"] = list(tools)
        if tool_choice:
            kwargs["tool_choice"] = tool_choice
    for attempt in range(limits.max_retries + 1):
        budget = limits.model_timeout
        if deadline is not None:
            budget = min(budget, deadline - loop.time())
            if budget <= 0:
                raise ModelCallError("Timeout", "the run's overall timeout passed")
        clipped = budget < limits.model_timeout
        started = loop.time()
        try:
            async with asyncio.timeout(budget):
                response = await _lib().acompletion(**kwargs, timeout=budget)
            reply = replace(_reply(response), latency=loop.time() - started)
        except (TimeoutError, _lib().Timeout) as exc:
            if clipped:
                raise ModelCallError("Timeout", "the run's overall timeout passed") from exc
            error: BaseException = exc
        except Exception as exc:  # classified below; non-retryable ones end the run
            error = exc
        else:
            yield reply
            return
        reason = _classify(error)
        detail = f"{type(error).__name__}: {error}"[:500]
        if reason is None:
            raise ModelCallError("ModelError", detail) from error
        if attempt == limits.max_retries:
            raise ModelCallError(reason, f"model call failed after {attempt + 1} attempts: {detail}") from error
        wanted = retry_after_seconds(error)
        delay = min(
            wanted if wanted is not None else limits.backoff_base * 2**attempt,
            limits.backoff_max,
        )
        if deadline is not None and loop.time() + delay >= deadline:
            raise ModelCallError("Timeout", f"no time left to retry after {detail}") from error
        yield ModelRetry(attempt=attempt + 1, reason=reason, delay=delay, message=detail)
        await asyncio.sleep(delay)  # backoff, not synchronization
