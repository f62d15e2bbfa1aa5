"""The `bash` tool: run a command line as argv pipelines — parsed, judged, never given to a shell.

Read-only commands (see `bash_policy`) run at once; others wait for approval; forbidden ones
(Secret data, raw credentials) never run. Pipes are `os.pipe()`s between processes started with
`asyncio.create_subprocess_exec`, each in its own session so a timeout can end the whole
pipeline by process group. Children get a minimal environment — the operator's own env holds
model API keys — plus whatever the caller configures (e.g. KUBECONFIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from lestrade.operator.tools.base import Tool, ToolOutput, Toolset
from lestrade.operator.tools.bash_parse import CommandLine, Pipeline, Stage
from lestrade.operator.tools.bash_policy import evaluate_text
from lestrade.operator.tools.common import FunctionTool, Params, schema

__all__ = ["BashRunner", "RunResult", "bash_toolset", "default_bash_env"]

_PASS_THROUGH_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "KUBECONFIG", "KUBERNETES_SERVICE_HOST",
                     "KUBERNETES_SERVICE_PORT")

_INSTRUCTIONS = """\
The bash tool runs one command line without a shell: pipes (|), &&, || and ; work; variables,
$(...), loops and here-docs do not. Read-only commands run at once: kubectl get/describe/logs/
top/events/explain, and grep, head, tail, sort, uniq, wc, cut, tr, awk, jq, cat as filters of
piped output (not on files). Anything else waits for a human's approval. Prefer the kubectl_*
tools; use bash for filtering large output."""


def default_bash_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASS_THROUGH_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra or {})
    return env


@dataclass
class RunResult:
    output: str
    exit_code: int
    timed_out: bool = False
    truncated: bool = False


class _Refused(Exception):
    pass


class BashRunner:
    """Executes a parsed CommandLine with exec and our own pipes."""

    def __init__(self, env: Mapping[str, str], *, timeout: float = 60.0, max_output: int = 200_000,
                 cwd: str | None = None) -> None:
        self.env = dict(env)
        self.timeout = timeout
        self.max_output = max_output
        self.cwd = cwd

    async def run(self, line: CommandLine) -> RunResult:
        if line.unsupported:
            raise _Refused(
                f"this command cannot run without a shell ({'; '.join(dict.fromkeys(line.unsupported))}); "
                "rewrite it as plain commands and pipes, or split it into several calls"
            )
        outputs: list[str] = []
        status = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        truncated = False
        for index, pipeline in enumerate(line.pipelines):
            if index:
                op = line.operators[index - 1] if index - 1 < len(line.operators) else ";"
                if (op == "&&" and status != 0) or (op == "||" and status == 0):
                    continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return RunResult("".join(outputs), 124, timed_out=True)
            result = await self._run_pipeline(pipeline, remaining, self.max_output - sum(map(len, outputs)))
            outputs.append(result.output)
            status = result.exit_code
            truncated |= result.truncated
            if result.timed_out:
                return RunResult("".join(outputs), 124, timed_out=True, truncated=truncated)
            if truncated:
                break
        return RunResult("".join(outputs), status, truncated=truncated)

    def _argv(self, stage: Stage) -> list[str]:
        argv: list[str] = []
        for i, arg in enumerate(stage.argv):
            if i in stage.glob_args:
                matches = sorted(glob.glob(arg, root_dir=self.cwd))
                argv.extend(matches or [arg])  # bash leaves a pattern without matches as-is
            else:
                argv.append(arg)
        program = argv[0]
        resolved = program if "/" in program else shutil.which(program, path=self.env.get("PATH"))
        if not resolved:
            raise _Refused(f"{program}: command not found")
        return [resolved, *argv]  # executable, then argv with the name as typed

    async def _run_pipeline(self, pipeline: Pipeline, timeout: float, budget: int) -> RunResult:
        procs: list[asyncio.subprocess.Process] = []
        stderr_tasks: list[asyncio.Task[bytes]] = []
        prev_read: int | None = None
        argvs = [self._argv(stage) for stage in pipeline.stages]  # fail before starting anything
        try:
            for i, stage in enumerate(pipeline.stages):
                last = i == len(pipeline.stages) - 1
                opened: list[IO[Any]] = []
                write_fd: int | None = None
                next_read: int | None = None
                try:
                    argv = argvs[i]
                    stdin: Any = prev_read if prev_read is not None else asyncio.subprocess.DEVNULL
                    stdout: Any = asyncio.subprocess.PIPE
                    if not last:
                        next_read, write_fd = os.pipe()
                        stdout = write_fd
                    stderr: Any = asyncio.subprocess.PIPE
                    if not last and i < len(pipeline.stderr_piped) and pipeline.stderr_piped[i]:
                        stderr = asyncio.subprocess.STDOUT  # `|&`
                    stdin, stdout, stderr = self._apply_redirects(stage, stdin, stdout, stderr, opened)
                    proc = await asyncio.create_subprocess_exec(
                        *argv[1:], executable=argv[0], stdin=stdin, stdout=stdout, stderr=stderr, env=self.env, cwd=self.cwd,
                        start_new_session=True,
                    )
                except BaseException:
                    if next_read is not None:
                        os.close(next_read)
                    raise
                finally:
                    # The child holds its own copies; ours must close so EOF travels down the pipe.
                    if prev_read is not None:
                        os.close(prev_read)
                        prev_read = None
                    if write_fd is not None:
                        os.close(write_fd)
                    for handle in opened:
                        handle.close()
                procs.append(proc)
                if proc.stderr is not None:
                    stderr_tasks.append(asyncio.ensure_future(_read_capped(proc.stderr, 20_000)))
                prev_read = next_read
            return await self._collect(procs, stderr_tasks, timeout, budget)
        except BaseException:
            for proc in procs:
                _kill(proc)
            for task in stderr_tasks:
                task.cancel()
            raise

    def _apply_redirects(self, stage: Stage, stdin: Any, stdout: Any, stderr: Any, opened: list[IO[Any]]) -> tuple[Any, Any, Any]:
        for r in stage.redirects:
            if r.op == "dup":
                if r.fd == 2 and r.target == 1:
                    stderr = asyncio.subprocess.STDOUT if stdout in (asyncio.subprocess.PIPE,) else stdout
                elif r.fd == 1 and r.target == 2:
                    stdout = stderr
                continue
            path = str(r.target)
            if r.op == "<":
                source: IO[bytes] = open(path, "rb")
                opened.append(source)
                stdin = source
                continue
            sink: IO[bytes] = open(path, "ab" if r.op == ">>" else "wb")
            opened.append(sink)
            if r.fd in (1, -1):
                stdout = sink
            if r.fd in (2, -1):
                stderr = sink
        return stdin, stdout, stderr

    async def _collect(self, procs: list[asyncio.subprocess.Process], stderr_tasks: list[asyncio.Task[bytes]],
                       timeout: float, budget: int) -> RunResult:
        last = procs[-1]
        chunks: list[bytes] = []
        size = 0
        truncated = False

        async def read_stdout() -> None:
            # Read to EOF even past the cap: on Python 3.11 `Process.wait()` only returns once
            # every pipe is closed, so an undrained pipe would hang a killed pipeline.
            nonlocal size, truncated
            if last.stdout is None:
                return
            while chunk := await last.stdout.read(65536):
                if truncated:
                    continue
                if size + len(chunk) > budget:
                    chunks.append(chunk[: max(0, budget - size)])
                    size = budget
                    truncated = True
                    for proc in procs:
                        _kill(proc)  # enough output; do not let a producer run on
                    continue
                chunks.append(chunk)
                size += len(chunk)

        tasks = [asyncio.ensure_future(read_stdout()), *(asyncio.ensure_future(p.wait()) for p in procs)]
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        timed_out = bool(pending)
        if pending:
            for proc in procs:
                _kill(proc)
            # Killed processes close their pipes at once; the bound only guards against a
            # grandchild that escaped the process group and still holds a pipe open.
            _, still = await asyncio.wait(pending, timeout=5)
            for task in still:
                task.cancel()
        errors = []
        for stderr_task in stderr_tasks:
            with contextlib.suppress(Exception):
                data = await asyncio.wait_for(stderr_task, 5)
                if data:
                    errors.append(data.decode("utf-8", errors="replace"))
        text = b"".join(chunks).decode("utf-8", errors="replace")
        if errors:
            text += ("" if not text or text.endswith("\n") else "\n") + "".join(errors)
        code = last.returncode if last.returncode is not None else -1
        if truncated:
            code = 0 if code < 0 else code
        return RunResult(text, code, timed_out=timed_out, truncated=truncated)


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> bytes:
    """Read to EOF (so the writer never blocks) but keep only the first `cap` bytes."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept)


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group id is its pid


def bash_toolset(*, env: Mapping[str, str] | None = None, timeout: float = 60.0, max_output: int = 200_000,
                 cwd: str | None = None) -> Toolset:
    """The `bash` tool. `env` is added to a minimal environment (PATH, HOME, KUBECONFIG...)."""
    runner = BashRunner(default_bash_env(env), timeout=timeout, max_output=max_output, cwd=cwd)

    def approval(p: Params) -> bool:
        _, verdict = evaluate_text(p.opt_str("command") or "")
        # A forbidden command is refused outright: asking a human to approve it would be moot.
        return verdict.needs_approval and not verdict.forbidden

    async def run(p: Params) -> ToolOutput:
        command = p.required("command")
        line, verdict = evaluate_text(command)
        if verdict.forbidden:  # never runs, so it never asks for approval either
            return ToolOutput(status="error", error=f"refused: {verdict.forbidden}")
        if line is None:
            return ToolOutput(status="error", error=f"refused: {verdict.reason}")
        try:
            result = await runner.run(line)
        except _Refused as exc:
            return ToolOutput(status="error", error=f"refused: {exc}")
        except OSError as exc:
            return ToolOutput(status="error", error=f"{type(exc).__name__}: {exc}")
        text = result.output
        if result.truncated:
            text += f"\n[output truncated at {max_output} bytes]"
        if result.timed_out:
            return ToolOutput(status="error", data=text, error=f"timed out after {timeout:.0f}s; partial output:\n{text}")
        if result.exit_code != 0:
            text += f"\n(exit code {result.exit_code})"
        return ToolOutput(status="success" if text.strip() else "no_data", data=text)

    tool: Tool = FunctionTool(
        "bash",
        "Run a command line (no shell: pipes, &&, ||, ; only). Read-only commands run at once; others need approval.",
        schema(["command"], command={"type": "string"}),
        run,
        lambda p: p.opt_str("command") or "",
        approval=approval,
        keep="tail",
    )
    return Toolset(name="bash", tools=[tool], instructions=_INSTRUCTIONS)
