"""run_rlm with a scripted model (`complete`) and the real sandboxed REPL."""

from __future__ import annotations

from typing import Any

import pytest

from lestrade.operator.rlm import DepthExceeded, RlmHooks, RlmReply, ToolDenied, ToolSpec, run_rlm

PODS = ToolSpec(
    "kubectl_get_by_kind_in_namespace",
    "List objects of a kind in a namespace.",
    {"type": "object", "properties": {"kind": {"type": "string"}, "namespace": {"type": "string"}}},
)
POD_TABLE = """\
NAME      READY   STATUS             RESTARTS   AGE
web-1     1/1     Running            0          3d
web-2     0/1     CrashLoopBackOff   14         3d
worker-1  0/1     CrashLoopBackOff   9          1d
db-0      1/1     Running            2          9d
"""


class Script:
    """A model that answers from a list and records what it was shown; harness hooks that record."""

    def __init__(
        self, replies: list[str], *, tool_error: Exception | None = None, query_error: Exception | None = None
    ) -> None:
        self.replies = list(replies)
        self.prompts: list[list[dict[str, Any]]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.queries: list[str] = []
        self.tool_error, self.query_error = tool_error, query_error

    async def complete(self, messages: list[dict[str, Any]]) -> RlmReply:
        self.prompts.append(messages)
        text = self.replies.pop(0) if self.replies else "```python\nprint('again')\n```"
        return RlmReply(
            text=text, reasoning=f"thinking {len(self.prompts)}", usage={"inputTokens": 10, "outputTokens": 5}
        )

    async def call_tool(self, name: str, args: dict[str, Any]) -> str:
        self.tool_calls.append((name, args))
        if self.tool_error:
            raise self.tool_error
        return POD_TABLE

    async def llm_query(self, prompt: str) -> str:
        self.queries.append(prompt)
        if self.query_error:
            raise self.query_error
        return "OOMKilled" if "worker-1" in prompt else "bad config"

    async def emit(self, kind: str, fields: dict[str, Any]) -> None:
        self.events.append((kind, fields))

    def hooks(self) -> RlmHooks:
        return RlmHooks(complete=self.complete, call_tool=self.call_tool, llm_query=self.llm_query, emit=self.emit)


ASK = [{"role": "user", "content": "Which pods in shop are crash-looping, and why?"}]


async def test_a_three_iteration_session_computes_over_tool_output() -> None:
    script = Script(
        [
            "Let me list the pods.\n```python\ntable = kubectl_get_by_kind_in_namespace(kind='Pod', namespace='shop')\n"
            "rows = [line.split() for line in table.splitlines()[1:]]\n"
            "crashing = {r[0]: int(r[3]) for r in rows if r[2] == 'CrashLoopBackOff'}\nprint(crashing)\n```",
            "```python\nreasons = {name: llm_query(f'Why does {name} crash?') for name in crashing}\n"
            "print(sum(crashing.values()), reasons)\n```",
            "FINAL(web-2 (bad config) and worker-1 (OOMKilled) are crash-looping, 23 restarts together.)",
        ]
    )
    outcome = await run_rlm(ASK, tools=[PODS], hooks=script.hooks(), max_iterations=5)

    assert (outcome.reason, outcome.iterations) == ("final", 3)
    assert outcome.answer == "web-2 (bad config) and worker-1 (OOMKilled) are crash-looping, 23 restarts together."
    assert script.tool_calls == [("kubectl_get_by_kind_in_namespace", {"kind": "Pod", "namespace": "shop"})]
    assert script.queries == ["Why does web-2 crash?", "Why does worker-1 crash?"]
    # the model saw each block's output in its next call
    assert script.prompts[1][-1] == {"role": "user", "content": "REPL output:\n{'web-2': 14, 'worker-1': 9}"}
    assert script.prompts[2][-1]["content"] == "REPL output:\n23 {'web-2': 'bad config', 'worker-1': 'OOMKilled'}"
    assert (
        script.prompts[0][0]["role"] == "system"
        and "kubectl_get_by_kind_in_namespace(kind=..., namespace=...)" in script.prompts[0][0]["content"]
    )
    assert script.prompts[0][1:] == ASK

    kinds = [kind for kind, _ in script.events]
    step = ["reasoning", "text", "usage", "tool_call", "tool_result"]
    assert kinds == step + step + ["reasoning", "text", "usage"]
    calls = [fields for kind, fields in script.events if kind == "tool_call"]
    results = [fields for kind, fields in script.events if kind == "tool_result"]
    assert [c["name"] for c in calls] == ["repl", "repl"] and [r["id"] for r in results] == [c["id"] for c in calls]
    assert calls[0]["input"]["code"].startswith("table = kubectl_get_by_kind_in_namespace(")
    assert results[1]["output"] == "23 {'web-2': 'bad config', 'worker-1': 'OOMKilled'}"
    assert script.events[2] == ("usage", {"inputTokens": 10, "outputTokens": 5})


async def test_max_iterations_ends_the_session() -> None:
    script = Script(["```python\nn = 0\n```"] + ["```python\nn += 1\nprint(n)\n```"] * 10)
    outcome = await run_rlm(ASK, tools=[], hooks=script.hooks(), max_iterations=3)
    assert (outcome.reason, outcome.iterations) == ("max_iterations", 3)
    assert len(script.prompts) == 3
    assert [f["output"] for k, f in script.events if k == "tool_result"] == ["(no output)", "1", "2"]


async def test_final_answer_from_code_ends_the_session() -> None:
    fence = "'`' * 3"  # an answer that shows code, which a plain reply could not (it would run)
    script = Script(
        [
            f"```python\nfinal_answer({fence} + 'python\\nprint(1)\\n' + {fence} + ' is how you print')\n```",
            "never asked",
        ]
    )
    outcome = await run_rlm(ASK, tools=[], hooks=script.hooks(), max_iterations=5)
    assert (outcome.reason, outcome.iterations) == ("final", 1)
    assert outcome.answer == "```python\nprint(1)\n``` is how you print"
    assert len(script.prompts) == 1


async def test_denials_and_depth_reach_the_code_as_exceptions() -> None:
    script = Script(
        [
            "```python\ntry:\n    kubectl_get_by_kind_in_namespace(kind='Secret', namespace='shop')\n"
            "except ToolDenied as exc:\n    print('denied:', exc)\n"
            "try:\n    llm_query('deeper')\nexcept DepthExceeded:\n    print('no deeper')\n```",
            "Done.",
        ],
        tool_error=ToolDenied("rule deny: Secret"),
        query_error=DepthExceeded("maxDepth 2"),
    )
    outcome = await run_rlm(ASK, tools=[PODS], hooks=script.hooks(), max_iterations=3)
    assert outcome.answer == "Done."
    assert [f["output"] for k, f in script.events if k == "tool_result"] == ["denied: rule deny: Secret\nno deeper"]


async def test_other_languages_are_text_and_at_least_one_iteration() -> None:
    script = Script(["The fix:\n```yaml\nresources:\n  limits: {memory: 1Gi}\n```"])
    outcome = await run_rlm(ASK, tools=[], hooks=script.hooks(), max_iterations=2)
    assert outcome.reason == "final" and outcome.answer.startswith("The fix:\n```yaml")
    with pytest.raises(ValueError, match="max_iterations"):
        await run_rlm(ASK, tools=[], hooks=script.hooks(), max_iterations=0)
