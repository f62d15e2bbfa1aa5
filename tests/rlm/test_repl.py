"""The REPL's behaviour for well-meant code: state, calls through the parent, refusals, restarts."""

from __future__ import annotations

import asyncio

import pytest
from rlmkit import Calls, failed_with

from lestrade.operator.rlm import DepthExceeded, Repl, SandboxLimits, SandboxUnavailable, ToolDenied, ToolSpec
from lestrade.operator.rlm import sandbox as rlm_sandbox

GET_POD = ToolSpec(
    "kubectl_get_by_name",
    "Get one object.",
    {"type": "object", "properties": {"kind": {}, "name": {}, "namespace": {}}},
)


async def test_state_persists_across_execute_calls() -> None:
    async with Repl() as repl:
        first = await repl.execute("import json\ncounts = {'web': 3}\ndef double(n):\n    return 2 * n", Calls())
        second = await repl.execute("counts['db'] = double(counts['web'])\ncounts", Calls())
        third = await repl.execute("print(json.dumps(counts, sort_keys=True))", Calls())
    assert first.error is None and first.stdout == ""
    assert second.stdout.strip() == "{'web': 3, 'db': 6}"
    assert third.stdout == '{"db": 6, "web": 3}\n'


async def test_llm_query_and_tools_go_through_on_call() -> None:
    calls = Calls(
        llm_query=lambda prompt: f"answer to {prompt!r}",
        kubectl_get_by_name=lambda **args: f"Pod {args['name']} in {args.get('namespace', '?')}: Running",
    )
    code = "a = llm_query('why?')\nb = kubectl_get_by_name('Pod', 'web-1', namespace='shop')\nprint(a)\nprint(b)"
    async with Repl(functions=[GET_POD]) as repl:
        result = await repl.execute(code, calls)
    assert result.error is None, result.error
    assert result.stdout.splitlines() == ["answer to 'why?'", "Pod web-1 in shop: Running"]
    assert calls.seen == [
        ("llm_query", {"prompt": "why?"}),
        ("kubectl_get_by_name", {"kind": "Pod", "name": "web-1", "namespace": "shop"}),
    ]
    assert result.calls == 2


async def test_refusals_are_exceptions_the_code_can_catch() -> None:
    calls = Calls(kubectl_get_by_name=ToolDenied("Secrets are off limits"), llm_query=DepthExceeded("depth 2 of 2"))
    code = (
        "try:\n    kubectl_get_by_name(kind='Secret', name='db')\nexcept ToolDenied as exc:\n    print('denied:', exc)\n"
        "try:\n    llm_query('deeper')\nexcept DepthExceeded as exc:\n    print('depth:', exc)\n"
        "kubectl_get_by_name(kind='Secret', name='db')"
    )
    async with Repl(functions=[GET_POD]) as repl:
        result = await repl.execute(code, calls)
        broken = await repl.execute("llm_query('x')", Calls(llm_query=RuntimeError("model down")))
        wrong = await repl.execute("llm_query(prompt=['not', 'a', 'string'])", calls)
        alive = await repl.execute("print('still here')", calls)
    assert result.stdout.splitlines() == ["denied: Secrets are off limits", "depth: depth 2 of 2"]
    assert failed_with(result, "ToolDenied"), result.error  # uncaught, it is reported like any error
    assert failed_with(broken, "ToolError") and "RuntimeError: model down" in (broken.error or "")
    assert failed_with(wrong, "ToolError") and "prompt (a string)" in (wrong.error or "")
    assert alive.stdout == "still here\n"


async def test_the_wall_clock_does_not_count_the_parents_time() -> None:
    release = asyncio.Event()

    async def slow(name: str, args: dict) -> str:
        asyncio.get_running_loop().call_later(1.5, release.set)
        await release.wait()  # the harness waits on a relay, a model, a person: not the code's time
        return "approved"

    async with Repl(SandboxLimits(wall_seconds=1.0), functions=[GET_POD]) as repl:
        result = await repl.execute("print(kubectl_get_by_name(kind='Pod', name='a'))", slow)
    assert result.stdout == "approved\n" and not result.ended, result
    assert result.seconds < 1.0


async def test_a_dead_repl_is_replaced_with_a_fresh_one() -> None:
    async with Repl(SandboxLimits(wall_seconds=1.0)) as repl:
        await repl.execute("kept = 1", Calls())
        first_pid = repl.pid
        ended = await repl.execute("while True: pass", Calls())
        after = await repl.execute("kept", Calls())
        assert repl.pid not in (None, first_pid)
    assert ended.ended and "the next code block starts a fresh one" in ended.text()
    assert failed_with(after, "NameError")


async def test_final_answer_and_echo() -> None:
    async with Repl() as repl:
        echoed = await repl.execute("x = [1, 2]\nx", Calls())
        final = await repl.execute("print('summing')\nfinal_answer(sum(x))\nprint('never')", Calls())
        none = await repl.execute("None", Calls())
    assert echoed.stdout == "[1, 2]\n" and echoed.final is None
    assert final.final == "3" and final.stdout == "summing\n"
    assert none.text() == "(no output)"


def test_function_names_must_be_identifiers() -> None:
    with pytest.raises(ValueError, match="'kubectl-get'"):
        Repl(functions=[ToolSpec("kubectl-get")])
    with pytest.raises(ValueError, match="'llm_query'"):
        Repl(functions=[ToolSpec("llm_query")])
    for name in ("class", "final_answer"):
        with pytest.raises(ValueError, match=repr(name)):
            Repl(functions=[ToolSpec(name)])


async def test_a_cancelled_block_ends_the_repl() -> None:
    entered = asyncio.Event()

    async def never(name: str, args: dict) -> str:
        entered.set()
        await asyncio.Event().wait()
        return ""

    async with Repl() as repl:
        pid = repl.pid
        task = asyncio.ensure_future(repl.execute("llm_query('hang')", never))
        await asyncio.wait_for(entered.wait(), 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await repl.execute("print('fresh')", Calls())
        assert repl.pid != pid
    assert after.stdout == "fresh\n"


async def test_refuses_to_run_without_landlock(monkeypatch) -> None:
    class NoLandlock:
        available = False

        def __init__(self, **kwargs: object) -> None:
            pass

    rlm_sandbox.repl_sandbox.cache_clear()
    monkeypatch.setattr(rlm_sandbox, "ToolSandbox", NoLandlock)
    try:
        with pytest.raises(SandboxUnavailable, match="no Landlock"):
            async with Repl():
                pass
    finally:
        rlm_sandbox.repl_sandbox.cache_clear()


async def test_refuses_to_run_without_seccomp(monkeypatch) -> None:
    rlm_sandbox.repl_sandbox.cache_clear()
    monkeypatch.setattr(rlm_sandbox, "seccomp_available", lambda: "this kernel has no seccomp")
    try:
        with pytest.raises(SandboxUnavailable, match="no seccomp"):
            async with Repl():
                pass
    finally:
        rlm_sandbox.repl_sandbox.cache_clear()
