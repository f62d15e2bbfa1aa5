"""The scripted OpenAI-compatible model server, over real HTTP.

No real LLM is reachable from tests or from a fresh `make run`, yet every caller must exercise
litellm's real client end to end (HTTP, SSE parsing, retries, error mapping). This server plays
scenarios (see `scenario.py`) behind `POST /v1/chat/completions` and `GET /v1/models`, records
every request body so tests can assert what the model was sent, and injects faults (429 with
Retry-After, 500, hanging, malformed tool JSON) on chosen steps.

The only state kept between requests is the request log and the per-conversation fault
counters; which step to play always comes from the request itself.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lestrade.modelserver import wire
from lestrade.modelserver.conversation import Conversation
from lestrade.modelserver.scenario import Fault, Scenario, load_scenarios
from lestrade.modelserver.script import ScriptError, Selection, render_reply, select_step
from lestrade.modelserver.templating import TemplateRenderError

__all__ = ["DEMO_SCENARIO_FILE", "ScriptedModelServer", "demo_scenario"]

DEMO_SCENARIO_FILE = Path(__file__).with_name("demo.yaml")
_START_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 15.0


def demo_scenario() -> Scenario:
    """The built-in demo model's scenario (`model: demo`), shipped as package data."""
    return load_scenarios(DEMO_SCENARIO_FILE)[0]


class _Uvicorn(uvicorn.Server):
    """A uvicorn server that reports its event loop once it is listening."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[asyncio.AbstractEventLoop], None]):
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._on_started(asyncio.get_running_loop())


class ScriptedModelServer:
    """Serves scenarios by name; `start()` runs it on a free 127.0.0.1 port in a thread.

    `latency_ms` is the default delay before every answer (a scenario's or step's own
    `latency_ms` wins). The built-in `demo` scenario is served unless `include_demo=False`.
    """

    def __init__(
        self,
        scenarios: Iterable[Scenario | dict[str, Any]] = (),
        *,
        latency_ms: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        include_demo: bool = True,
    ) -> None:
        self.latency_ms = latency_ms
        self.host = host
        self._port = port
        self._lock = threading.Lock()
        self._scenarios: dict[str, Scenario] = {}
        self._requests: list[tuple[str, dict[str, Any]]] = []
        self._fault_counts: dict[tuple[str, str, str], int] = {}
        self._thread: threading.Thread | None = None
        self._uvicorn: _Uvicorn | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        if include_demo:
            self.add_scenario(demo_scenario())
        for scenario in scenarios:
            self.add_scenario(scenario)
        routes = []
        for prefix in ("/v1", ""):
            routes += [
                Route(f"{prefix}/chat/completions", self._chat, methods=["POST"]),
                Route(f"{prefix}/models", self._models, methods=["GET"]),
            ]
        routes.append(Route("/healthz", self._healthz, methods=["GET"]))
        routes.append(Route("/requests", self._recorded, methods=["GET"]))
        self.app = Starlette(routes=routes)

    # ----- scenarios and the request log -------------------------------------------------

    def add_scenario(self, scenario: Scenario | dict[str, Any]) -> Scenario:
        """Adds (or replaces, resetting its fault counters) a scenario; returns it parsed."""
        parsed = Scenario.parse(scenario)
        with self._lock:
            self._scenarios[parsed.name] = parsed
            self._fault_counts = {k: v for k, v in self._fault_counts.items() if k[0] != parsed.name}
        return parsed

    def scenario(self, name: str) -> Scenario:
        with self._lock:
            return self._scenarios[name]

    @property
    def scenario_names(self) -> list[str]:
        with self._lock:
            return sorted(self._scenarios)

    def requests(self, scenario: str | None = None) -> list[dict[str, Any]]:
        """Copies of the JSON bodies received (for `scenario` only, if given), oldest first."""
        with self._lock:
            return [copy.deepcopy(b) for name, b in self._requests if scenario in (None, name)]

    def reset(self, scenario: str | None = None) -> None:
        """Forgets recorded requests and fault counters (of one scenario, or all)."""
        with self._lock:
            self._requests = [(n, b) for n, b in self._requests if scenario not in (None, n)]
            self._fault_counts = {k: v for k, v in self._fault_counts.items() if scenario not in (None, k[0])}

    def litellm_params(self, scenario: str) -> dict[str, str]:
        """Keyword arguments for litellm (and a modelList entry) that play `scenario`."""
        return {"model": f"openai/{scenario}", "api_base": self.base_url, "api_key": "scripted"}

    # ----- lifecycle ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (`api_base` for litellm)."""
        return f"{self.url}/v1"

    def _config(self, **kwargs: Any) -> uvicorn.Config:
        return uvicorn.Config(
            self.app,
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=2,
            **kwargs,
        )

    def _started(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._closing = asyncio.Event()

    def start(self) -> ScriptedModelServer:
        """Starts serving in a background thread; returns once the port accepts connections."""
        if self._thread is not None:
            raise RuntimeError("the scripted model server is already running")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it; without it every small response waits ~40 ms (Nagle
        # against delayed ACKs), which dominated every test that talks to the model
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self._port))
        self._port = sock.getsockname()[1]
        ready = threading.Event()

        def started(loop: asyncio.AbstractEventLoop) -> None:
            self._started(loop)
            ready.set()

        self._uvicorn = _Uvicorn(self._config(), started)
        server = self._uvicorn
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])),
            name=f"scripted-model-server-{self._port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"scripted model server did not start on {self.url}")
        return self

    def stop(self) -> None:
        """Stops serving: hanging and delayed requests are released, then the thread ends."""
        thread, server, loop, closing = self._thread, self._uvicorn, self._loop, self._closing
        if thread is None or server is None:
            return
        if loop is not None and closing is not None and not loop.is_closed():
            loop.call_soon_threadsafe(closing.set)
        server.should_exit = True
        thread.join(_STOP_TIMEOUT_S)
        self._thread = self._uvicorn = self._loop = self._closing = None

    def serve(self) -> None:
        """Serves in the calling thread until interrupted (Ctrl-C); used by the CLI."""
        _Uvicorn(self._config(host=self.host, port=self._port), self._started).run()

    def __enter__(self) -> ScriptedModelServer:
        return self.start() if self._thread is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----- HTTP handlers -----------------------------------------------------------------

    async def _healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _recorded(self, request: Request) -> Response:
        """The request log (`requests()`) for a server in another process: `?scenario=` one."""
        return JSONResponse(self.requests(request.query_params.get("scenario")))

    async def _models(self, request: Request) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "lestrade-scripted"}
            for name in self.scenario_names
        ]
        return JSONResponse({"object": "list", "data": data})

    def _find(self, model: str) -> Scenario | None:
        with self._lock:
            # `openai/<scenario>` sends `<scenario>`; accept a provider prefix as well.
            return self._scenarios.get(model) or self._scenarios.get(model.rsplit("/", 1)[-1])

    async def _chat(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "expected a JSON object with a messages list", "invalid_request_error")
        model = str(body.get("model", ""))
        scenario = self._find(model)
        with self._lock:
            self._requests.append((scenario.name if scenario else model, body))
        if scenario is None:
            # names only by count: litellm classifies any error text containing "429" (a
            # scenario named after a test of 429s, say) as a rate limit
            return _error(
                404,
                f"no scenario named {model!r}; {len(self.scenario_names)} scenarios are loaded "
                "(GET /v1/models lists them)",
                "invalid_request_error",
                "model_not_found",
            )
        conversation = Conversation.from_request(body)
        try:
            selection = select_step(scenario, conversation)
        except ScriptError as exc:
            return _error(400, str(exc), "invalid_request_error")
        fault = self._firing_fault(scenario, selection, conversation)
        if fault is not None and fault.kind == "hang":
            await self._hang(request)
            return _error(503, "the scripted model server is shutting down", "server_error")
        step = selection.step
        for latency in (step.latency_ms, scenario.latency_ms, self.latency_ms):
            if latency is not None:
                await self._pause(latency / 1000)
                break
        if fault is not None and fault.kind == "rate_limit":
            return _error(
                429,
                f"Rate limit reached (scripted fault in {scenario.name} {selection.key})",
                "rate_limit_error",
                "rate_limit_exceeded",
                headers={"Retry-After": str(fault.retry_after)},
            )
        if fault is not None and fault.kind == "server_error":
            return _error(500, f"scripted server error in {scenario.name} {selection.key}", "server_error")
        try:
            reply = render_reply(scenario, selection, conversation, fault)
        except TemplateRenderError as exc:
            return _error(500, f"scenario {scenario.name!r} {selection.key}: {exc}", "server_error")
        if not reply.tool_calls and not scenario.ignores_response_format:
            content = wire.apply_response_format(reply.content, body.get("response_format"))
            reply = dataclasses.replace(reply, content=content)
        usage = wire.usage_for(body, reply, step.usage)
        response_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if not body.get("stream"):
            return JSONResponse(wire.completion(reply, model=model, response_id=response_id, usage=usage))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = wire.stream_chunks(reply, model=model, response_id=response_id, usage=usage if include_usage else None)
        return StreamingResponse(self._sse(chunks, step.stream_chunk_ms / 1000), media_type="text/event-stream")

    def _firing_fault(self, scenario: Scenario, selection: Selection, conversation: Conversation) -> Fault | None:
        fault = selection.step.fault
        if fault is None or fault.times is None:
            return fault
        key = (scenario.name, selection.key, conversation.key)
        with self._lock:
            seen = self._fault_counts.get(key, 0)
            if seen >= fault.times:
                return None
            self._fault_counts[key] = seen + 1
        return fault

    async def _pause(self, seconds: float) -> None:
        """Waits `seconds`, or less if the server is stopping."""
        if seconds <= 0 or self._closing is None:
            return
        try:
            await asyncio.wait_for(self._closing.wait(), seconds)
        except TimeoutError:
            pass

    async def _hang(self, request: Request) -> None:
        """Never answers: returns only when the client goes away or the server stops."""
        while self._closing is not None and not self._closing.is_set():
            if await request.is_disconnected():
                return
            await self._pause(0.05)

    async def _sse(self, chunks: Iterable[dict[str, Any]], delay_s: float) -> AsyncIterator[str]:
        for number, chunk in enumerate(chunks):
            if number and delay_s:
                await self._pause(delay_s)
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"


def _error(
    status: int, message: str, kind: str, code: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    return JSONResponse(wire.error_body(message, kind, code), status_code=status, headers=headers)
