"""A persistent REPL process per rlm session, confined by `sandbox.py`, driven over pipes.

    async with Repl(limits, functions=[ToolSpec(...)]) as repl:
        result = await repl.execute(code, on_call)

Variables survive from one `execute` to the next. Inside the code, `llm_query(prompt)` and one
function per tool are stubs: each sends a call over the pipe and blocks until `on_call(name,
args)` (the harness's async handler) answers; `ToolDenied` / `DepthExceeded` raised by the
handler become exceptions of the same name in the code. The wall-clock limit counts the code's
own time, not the time the handler takes. When the REPL dies (CPU limit, timeout, broken
protocol) the result says so and the next `execute` starts a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import keyword
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lestrade.operator.rlm.contract import DepthExceeded, ToolDenied, ToolSpec
from lestrade.operator.rlm.protocol import (
    CallRequest,
    ExecReply,
    ProtocolError,
    encode_frame,
    parse_message,
    read_frame,
)
from lestrade.operator.rlm.sandbox import SandboxLimits, repl_sandbox

__all__ = ["Repl", "ExecResult", "OnCall", "LLM_QUERY"]

OnCall = Callable[[str, dict[str, Any]], Awaitable[str]]
LLM_QUERY = "llm_query"
_CHILD_SOURCE = (Path(__file__).with_name("child.py")).read_text()
_RESERVED = {"final_answer", "ToolDenied", "DepthExceeded", "ToolError"}  # the REPL's own names
_STDERR_KEEP = 8_000  # bytes of the REPL's raw stderr kept for a crash report
_ERROR_MAX = 2_000


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    error: str | None  # the code's exception (traceback), or why the REPL was ended
    final: str | None  # the value given to final_answer(...), if the code called it
    truncated: bool
    seconds: float  # the code's own time, without the handler's
    calls: int  # llm_query and tool calls made by this block
    ended: bool = False  # the REPL was ended: its variables are gone

    def text(self) -> str:
        """What the model reads."""
        parts = [self.stdout.rstrip("\n")] if self.stdout else []
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.error:
            parts.append("[error]\n" + self.error.rstrip("\n"))
        if self.truncated:
            parts.append("[output truncated]")
        if self.ended:
            parts.append("[the REPL was ended; the next code block starts a fresh one without earlier variables]")
        return "\n".join(parts) or "(no output)"


class Repl:
    def __init__(self, limits: SandboxLimits | None = None, functions: Iterable[ToolSpec] = ()) -> None:
        self.limits = limits or SandboxLimits()
        specs = list(functions)
        self._functions = [{"name": LLM_QUERY, "params": ["prompt"], "doc": "Ask a model; returns its answer."}]
        self._functions += [{"name": s.name, "params": s.param_names, "doc": s.description} for s in specs]
        names = [f["name"] for f in self._functions]
        bad = [n for n in names if not n.isidentifier() or keyword.iskeyword(n) or n in _RESERVED or names.count(n) > 1]  # type: ignore[attr-defined,arg-type]
        if bad:
            raise ValueError(f"functions: {bad[0]!r} is not a unique Python identifier the REPL can offer")
        self._names = set(names)
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr = bytearray()
        self._stderr_task: asyncio.Task[None] | None = None
        self._workdir: str | None = None
        self._exec_id = 0
        self._killed = False
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> Repl:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pid(self) -> int | None:
        alive = self._proc is not None and self._proc.returncode is None and not self._killed
        return self._proc.pid if alive and self._proc is not None else None

    async def start(self) -> None:
        """Starts the confined interpreter and waits until it is confined and listening.
        `SandboxUnavailable` when this kernel cannot confine it."""
        sandbox = repl_sandbox()
        self._workdir = self._workdir or tempfile.mkdtemp(prefix="lestrade-rlm-")
        self._stderr = bytearray()
        self._killed = False
        self._proc = await asyncio.create_subprocess_exec(
            sandbox.executable,
            "-I",
            "-S",
            "-B",
            "-c",
            _CHILD_SOURCE,
            sandbox.after_start.bpf.hex(),
            json.dumps(self._functions),
            str(self.limits.max_output),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={},
            cwd=self._workdir,
            start_new_session=True,
            close_fds=True,
            preexec_fn=sandbox.preexec(self.limits),
        )
        self._stderr_task = asyncio.ensure_future(self._drain_stderr(self._proc))
        try:
            assert self._proc.stdout is not None
            message = await asyncio.wait_for(read_frame(self._proc.stdout, 1024), self.limits.start_seconds)
            if parse_message(message) != "ready":
                raise ProtocolError("the REPL did not start with 'ready'")
        except (asyncio.IncompleteReadError, ProtocolError, TimeoutError) as exc:
            await self._end()
            raise RuntimeError(
                f"the sandboxed REPL did not start ({type(exc).__name__}): {self._stderr_tail()}"
            ) from None

    async def execute(self, code: str, on_call: OnCall) -> ExecResult:
        async with self._lock:
            if self.pid is None:
                await self._end()  # reaps a REPL killed by a cancelled block
                await self.start()
            return await self._execute(code, on_call)

    async def close(self) -> None:
        await self._end()
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    async def _execute(self, code: str, on_call: OnCall) -> ExecResult:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        self._exec_id += 1
        started, paused, calls = time.monotonic(), 0.0, 0

        def own_time() -> float:
            return time.monotonic() - started - paused

        try:
            proc.stdin.write(encode_frame({"type": "exec", "id": self._exec_id, "code": code}))
            await proc.stdin.drain()
            while True:
                remaining = self.limits.wall_seconds - own_time()
                if remaining <= 0:
                    raise TimeoutError
                message = parse_message(
                    await asyncio.wait_for(read_frame(proc.stdout, self.limits.max_message), remaining)
                )
                if isinstance(message, CallRequest):
                    calls += 1
                    handler_started = time.monotonic()
                    reply = await self._answer(message, on_call)
                    paused += time.monotonic() - handler_started
                    proc.stdin.write(encode_frame(reply))
                    await proc.stdin.drain()
                elif isinstance(message, ExecReply):
                    if message.exec_id != self._exec_id:
                        continue  # a frame the code forged or an earlier block's: not this result
                    return self._result(message, own_time(), calls)
                else:
                    raise ProtocolError("'ready' in the middle of a session")
        except TimeoutError:
            reason = f"timed out after {self.limits.wall_seconds:g} s of wall-clock time"
        except ProtocolError as exc:
            reason = f"the REPL broke the protocol ({exc})"
        except (asyncio.IncompleteReadError, ConnectionError):
            await self._end()
            reason = self._death()
        except BaseException:  # cancelled mid-block: the REPL may be waiting on a reply forever
            self._kill()
            raise
        await self._end()
        return ExecResult("", "", f"{reason}; the REPL was ended", None, False, own_time(), calls, ended=True)

    async def _answer(self, call: CallRequest, on_call: OnCall) -> dict[str, Any]:
        def refuse(kind: str, message: str) -> dict[str, Any]:
            return {"type": "reply", "ok": False, "error": kind, "message": message[:_ERROR_MAX]}

        if call.name not in self._names:
            return refuse("error", f"no function {call.name!r} here")
        if call.name == LLM_QUERY and (set(call.args) != {"prompt"} or not isinstance(call.args["prompt"], str)):
            return refuse("error", "llm_query takes one argument: prompt (a string)")
        try:
            value = await on_call(call.name, call.args)
        except ToolDenied as exc:
            return refuse("denied", exc.reason)
        except DepthExceeded as exc:
            return refuse("depth", str(exc) or "maximum depth reached")
        except Exception as exc:  # noqa: BLE001 - the harness's failure is the code's error to handle
            return refuse("error", f"{type(exc).__name__}: {exc}")
        text = value if isinstance(value, str) else str(value)
        cap = self.limits.max_message // 4
        return {"type": "reply", "ok": True, "value": text if len(text) <= cap else text[:cap] + "\n[truncated]"}

    def _result(self, reply: ExecReply, seconds: float, calls: int) -> ExecResult:
        cap = self.limits.max_output
        truncated = (
            reply.truncated or len(reply.stdout) > cap or len(reply.stderr) > cap or len(reply.error or "") > cap
        )
        return ExecResult(
            stdout=reply.stdout[:cap],
            stderr=reply.stderr[:cap],
            error=None if reply.error is None else reply.error[-cap:],  # the exception is last
            final=None if reply.final is None else reply.final[: self.limits.max_message // 4],
            truncated=truncated,
            seconds=seconds,
            calls=calls,
        )

    def _death(self) -> str:
        code = self._proc.returncode if self._proc is not None else None
        if code == -signal.SIGXCPU:
            why = f"the REPL used up its CPU time ({self.limits.cpu_seconds} s)"
        elif code is not None and code < 0:
            why = f"the REPL was killed by {signal.Signals(-code).name}"
        else:
            why = f"the REPL exited (status {code})"
        tail = self._stderr_tail()
        return f"{why}: {tail}" if tail else why

    def _stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace").strip()[-_ERROR_MAX:]

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(65536):  # read to EOF, keep only the start
            if len(self._stderr) < _STDERR_KEEP:
                self._stderr += chunk[: _STDERR_KEEP - len(self._stderr)]

    def _kill(self) -> None:
        self._killed = True
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)  # its own session: the group id is its pid

    async def _end(self) -> None:
        self._kill()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        await proc.wait()
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._stderr_task, 5)
        self._proc = proc  # keep the return code for `_death`; `pid` is None once it ended
