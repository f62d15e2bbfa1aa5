"""Agent engine benchmark: prompt cost, loop overhead per step, parallel tool calls.

    .venv/bin/python bench/agent_bench.py [--steps 40] [--repeats 3]

Prints:

1. first-call tokens (system prompt + tool definitions, tiktoken) for the default toolset
   (`lestrade.operator.tools.default_registry`, built without contacting a cluster), with and
   without Prometheus, and with the minimal prompt of reference 000's example; budget 5,000;
2. loop overhead per step against the scripted model server with latency 0: a run of N tool
   steps, ms per step, next to the same recorded requests replayed as bare `litellm.acompletion`
   calls, so the difference is what the loop itself adds (token counting, events, tools);
3. parallel tool calls: one turn of 5 tools that each take 200 ms, serial cost vs measured
   (first ToolStarted -> last ToolResult).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "agent"))

import litellm  # noqa: E402

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)
from lestrade.config import ModelConfig  # noqa: E402
from lestrade.modelserver import Scenario, ScriptedModelServer, Step, ToolCall  # noqa: E402
from lestrade.operator.agent import Agent, Limits, PromptConfig, first_call_tokens  # noqa: E402
from lestrade.operator.tools.base import ToolOutput, ToolRegistry, Toolset  # noqa: E402

BUDGET = 5_000
MINIMAL = {
    "todowrite_instructions": False,
    "todowrite_reminder": False,
    "ai_safety": False,
    "style_guide": False,
    "general_instructions": False,
}


class _Tool:
    """A fake tool that answers after `delay` seconds (0: at once), with unique output."""

    def __init__(self, name: str, delay: float = 0.0) -> None:
        self.name = name
        self.description = f"Benchmark tool {name}."
        self.parameters = {"type": "object", "properties": {"x": {"type": "string"}}}
        self.delay = delay

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        return f"{self.name} {params}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        if self.delay:
            await asyncio.sleep(self.delay)  # simulated tool latency
        return ToolOutput("success", f"{self.name} result for {params.get('x')}")


def _registries() -> list[tuple[str, ToolRegistry]]:
    try:
        from kubernetes.client import ApiClient

        from lestrade.operator.tools import default_registry
    except ImportError:
        from representative_tools import representative_registry

        return [("representative 16 tools (no default_registry yet)", representative_registry())]
    accepted = inspect.signature(default_registry).parameters
    client = ApiClient()
    args = [client] if "api_client" in accepted else []
    out = [("default toolset", default_registry(*args))]
    if "prometheus_url" in accepted:
        out.append(("default + Prometheus", default_registry(*args, prometheus_url="http://127.0.0.1:9")))
    if "alertmanager_url" in accepted:
        out.append(
            (
                "scoped + Prom. + Alertmanager",
                default_registry(
                    *args,
                    prometheus_url="http://127.0.0.1:9",
                    alertmanager_url="http://127.0.0.1:9",
                    scope_namespaces=["team-a", "team-a-db"],
                ),
            )
        )
    client.close()
    return out


def bench_prompt() -> None:
    print("1. first model call: system prompt + tool definitions (tiktoken cl100k_base)")
    for label, registry in _registries():
        full = first_call_tokens(registry, PromptConfig(enabled_prompts=""))
        lean = first_call_tokens(registry, PromptConfig(enabled_prompts="", behavior_controls=MINIMAL))
        tools = len(registry.enabled_tools())
        verdict = "OK" if full <= BUDGET else "OVER BUDGET"
        print(
            f"   {label:<28} {tools:>2} tools: {full:>5} tokens ({verdict}, budget {BUDGET}); minimal prompt {lean:>5}"
        )


async def _run(agent: Agent, ask: str) -> tuple[float, list[Any]]:
    began = time.perf_counter()
    events = [e async for e in agent.run(agent.initial_messages(ask))]
    return time.perf_counter() - began, events


async def bench_overhead(server: ScriptedModelServer, steps: int, repeats: int) -> None:
    name = "bench-steps"
    calls = [Step(tool_calls=[ToolCall(name="t", arguments={"x": f"s{i}"})]) for i in range(steps)]
    server.add_scenario(Scenario(name=name, steps=[*calls, Step(content="done")]))
    registry = ToolRegistry([Toolset("bench", [_Tool("t")])])
    model = ModelConfig(name, server.litellm_params(name))
    agent = Agent(model, registry, PromptConfig(), Limits(max_steps=steps + 5))
    await _run(agent, "warm up")
    loop_ms, bare_ms = [], []
    for r in range(repeats):
        server.reset(name)
        elapsed, events = await _run(agent, f"run {r}")
        assert events[-1].kind == "answer", events[-1]
        loop_ms.append(elapsed * 1000)
        # The same requests, replayed as bare litellm calls: what the model round trips cost.
        began = time.perf_counter()
        for body in server.requests(name):
            await litellm.acompletion(
                messages=body["messages"],
                tools=body.get("tools"),
                max_tokens=body["max_tokens"],
                num_retries=0,
                **server.litellm_params(name),
            )
        bare_ms.append((time.perf_counter() - began) * 1000)
    n = steps + 1
    loop_step = statistics.median(loop_ms) / n
    bare_step = statistics.median(bare_ms) / n
    print(f"2. loop with an instant model: {steps} tool steps + answer, median of {repeats} runs")
    print(
        f"   per step {loop_step:6.1f} ms; the same requests as bare litellm calls {bare_step:6.1f} ms"
        f" -> loop overhead {loop_step - bare_step:5.1f} ms/step"
    )


async def bench_parallel(server: ScriptedModelServer) -> None:
    name = "bench-parallel"
    n, delay = 5, 0.2
    server.add_scenario(
        Scenario(
            name=name,
            steps=[
                Step(tool_calls=[ToolCall(name=f"slow{i}", arguments={"x": str(i)}) for i in range(n)]),
                Step(content="done"),
            ],
        )
    )
    registry = ToolRegistry([Toolset("bench", [_Tool(f"slow{i}", delay) for i in range(n)])])
    agent = Agent(ModelConfig(name, server.litellm_params(name)), registry)
    stamps: dict[str, float] = {}
    async for event in agent.run(agent.initial_messages("parallel")):
        if event.kind == "tool_started":
            stamps.setdefault("first_start", time.perf_counter())
        if event.kind == "tool_result":
            stamps["last_result"] = time.perf_counter()
    measured = (stamps["last_result"] - stamps["first_start"]) * 1000
    serial = n * delay * 1000
    print(f"3. parallel tool calls: {n} tools x {delay * 1000:.0f} ms in one turn")
    print(f"   serial would take {serial:.0f} ms, measured {measured:.0f} ms -> speed-up {serial / measured:.1f}x")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    bench_prompt()
    with ScriptedModelServer(latency_ms=0) as server:
        await bench_overhead(server, args.steps, args.repeats)
        await bench_parallel(server)


if __name__ == "__main__":
    asyncio.run(main())
