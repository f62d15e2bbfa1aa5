"""What the model is told in rlm mode, and how its replies are read.

The convention: a reply with a fenced code block tagged `python` (or `py`, `repl`) is code to
run; the REPL's output comes back as the next user message. A reply without one is the final
answer (a `FINAL(...)` wrapper, which some RLM prompts teach, is unwrapped). Code can also end
the session with `final_answer(value)` - the way to give an answer that itself shows Python.
Blocks in other languages (```yaml, ```text) are text, never run.
"""

from __future__ import annotations

import re

from lestrade.operator.rlm.contract import ToolSpec

__all__ = ["system_prompt", "code_of", "final_of", "observation"]

_CODE = re.compile(r"```[ \t]*(?:python3?|py|repl)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_FINAL = re.compile(r"\A\s*FINAL\((.*)\)\s*\Z", re.DOTALL)

_PROMPT = """\
You are in rlm mode: you work by writing Python that a persistent REPL runs; you then read its output.
Each reply of yours is one of:
- a ```python code block (a sentence of explanation around it is fine): it runs, variables survive
  between blocks, and the REPL's output (print it; a final bare expression is echoed) comes back to you;
- your final answer, with no python code block. From code, final_answer(value) also ends the session
  with str(value) as the answer.
Functions the code can call (each call returns a string):
- llm_query(prompt) -> str: ask a model a self-contained question (it sees only the prompt), e.g. to
  summarise or classify a long text piece by piece.
{tools}
A call may raise ToolDenied (a permission rule or a person refused it), DepthExceeded (llm_query is not
available at this depth) or ToolError; catch them if you can do without. The REPL is sandboxed: no
network, files or processes, and limited CPU, memory, time and output ({max_output} characters per block).
You have at most {iterations} replies: keep code blocks short and finish with an answer."""


def _signature(tool: ToolSpec) -> str:
    params = ", ".join(f"{name}=..." for name in tool.param_names)
    description = " ".join(tool.description.split())
    return f"- {tool.name}({params}) -> str: {description[:300]}"


def system_prompt(tools: list[ToolSpec], *, max_output: int, iterations: int) -> str:
    listed = "\n".join(_signature(t) for t in tools) or "- (no tools in this session)"
    return _PROMPT.format(tools=listed, max_output=max_output, iterations=iterations)


def code_of(text: str) -> str | None:
    """The code to run (every python block, in order), or None when the reply is an answer."""
    blocks = [b.strip("\n") for b in _CODE.findall(text or "")]
    blocks = [b for b in blocks if b.strip()]
    return "\n\n".join(blocks) if blocks else None


def final_of(text: str) -> str:
    match = _FINAL.match(text or "")
    return (match.group(1) if match else text or "").strip()


def observation(output: str) -> str:
    return f"REPL output:\n{output}"
