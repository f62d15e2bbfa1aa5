"""The `bash` tool: run a command line as argv pipelines — parsed, judged, never given to a shell.

Read-only commands (see `bash_policy`) run at once; others wait for approval; forbidden ones
(Secret data, raw credentials) never run. Pipes are `os.pipe()`s between processes started with
`asyncio.create_subprocess_exec`, each in its own session so a timeout can end the whole
pipeline by process group.

What a command can reach does not depend on the parser: children get an environment built from
an allowlist (no model keys, no `KUBERNETES_SERVICE_*` that would lead kubectl to the
operator's mounted token; `KUBECONFIG` only the tools identity's, `HOME` and the working folder
a private one), and each child confines itself with Landlock (`sandbox.py`) so that it cannot
open the operator's token, kubeconfig, model keys or `/proc`, whatever it runs. Redirections
and globs, which the operator itself resolves, are held to the same sandbox.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import glob
import itertools
import os
import resource
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from lestrade.operator.tools.base import Tool, ToolOutput, Toolset
from lestrade.operator.tools.bash.kubectl_output import (
    KubectlOutputRefused,
    OutputPlan,
    output_plan,
    render_output,
    render_table_output,
)
from lestrade.operator.tools.bash.parse import CommandLine, Pipeline, Stage
from lestrade.operator.tools.bash.policy import evaluate_text
from lestrade.operator.tools.bash.sandbox import ToolSandbox
from lestrade.operator.tools.common import FunctionTool, Params, schema
from lestrade.operator.tools.kubernetes.api import KubeApi
from lestrade.operator.tools.redact import redact_async

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["BashRunner", "RunResult", "bash_toolset", "confined_runner", "default_bash_env", "bash_sandbox"]

# Never from the operator's environment: its API keys, its KUBECONFIG, KUBERNETES_SERVICE_*.
_PASS_THROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

_INSTRUCTIONS = """\
bash: prefer the kubectl_* tools; use bash to filter large output. No shell: |, &&, || and ;
work, variables, $(...) and loops do not. Run at once: kubectl get/describe/logs/top/events/
explain, and grep, head, tail, sort, uniq, wc, cut, tr, awk, jq, cat on piped output. Spell
options in full: an abbreviated or unlisted option, like any other command, waits for approval.
kubectl -o json|yaml|jsonpath=|jsonpath-as-json=|custom-columns= work (credentials [REDACTED]);
Go templates do not."""


def default_bash_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of the operator's environment, plus `extra` (the caller's own)."""
    env = {k: os.environ[k] for k in _PASS_THROUGH_ENV if k in os.environ}
    env.setdefault("PATH", _DEFAULT_PATH)
    env["KUBECTL_KUBERC"] = "false"  # no ~/.kube/kuberc: it would redefine commands and output flags
    env.update(extra or {})
    for key in [k for k in env if k.startswith("KUBERNETES_SERVICE_") or k.startswith("KUBERNETES_PORT")]:
        del env[key]  # in-cluster, kubectl would fall back to the operator's mounted token
    return env


_workdir: str | None = None


def _process_workdir() -> str:
    """A private (0700) working folder for tool processes, removed when the process exits."""
    global _workdir
    if _workdir is None:
        _workdir = tempfile.mkdtemp(prefix="lestrade-tools-")
        atexit.register(shutil.rmtree, _workdir, True)
    return _workdir


def _server_ports(kubeconfig: str | None) -> list[int]:
    """The API server ports a kubeconfig names (the only TCP ports tool processes may use)."""
    if not kubeconfig:
        return []
    try:
        config = yaml.safe_load(Path(kubeconfig).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    ports = []
    for entry in config.get("clusters") or []:
        url = urlsplit(str((entry.get("cluster") or {}).get("server") or ""))
        with contextlib.suppress(ValueError):
            ports.append(url.port or (443 if url.scheme == "https" else 80))
    return ports


def _operator_credentials() -> list[str]:
    """Credential files the operator process itself was pointed at (kept from the tools)."""
    paths = ["/var/run/secrets", "/run/secrets", os.path.expanduser("~/.kube")]
    paths += [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if os.environ.get("LESTRADE_MODEL_LIST"):
        paths.append(os.environ["LESTRADE_MODEL_LIST"])
    return paths


def bash_sandbox(env: Mapping[str, str], workdir: str, kubeconfig: str | None) -> ToolSandbox:
    """The sandbox of bash's children: system folders, the folders on PATH (not the operator's
    home or working folder, nor anything above or below them), the kubectl binary, the tools'
    kubeconfig folder; writes
    only in `workdir`; TCP only to the kubeconfig's API server. One per configuration (a
    registry is built per run; the ruleset is not)."""
    hidden = tuple(_operator_credentials())
    return _cached_sandbox(env.get("PATH", ""), workdir, kubeconfig, hidden, os.getcwd())


@functools.lru_cache(maxsize=16)
def _cached_sandbox(
    path: str, workdir: str, kubeconfig: str | None, hidden_paths: tuple[str, ...], cwd: str
) -> ToolSandbox:
    protected = [Path(os.path.realpath(p)) for p in (os.path.expanduser("~"), cwd)]
    reads: list[str] = []
    for entry in path.split(os.pathsep):
        real = Path(os.path.realpath(entry)) if os.path.isabs(entry) else None
        # not the operator's home or working folder, nor anything above or below them
        if real and real.is_dir() and not any(real == p or real in p.parents or p in real.parents for p in protected):
            reads.append(str(real))
    kubectl = shutil.which("kubectl", path=path)
    if kubectl:
        reads.append(os.path.realpath(kubectl))  # the binary alone (its folder may be the operator's)
    hidden = list(hidden_paths)
    if kubeconfig:
        folder = str(Path(os.path.realpath(kubeconfig)).parent)
        reads.append(folder)
        hidden = [h for h in hidden if os.path.realpath(h) not in (os.path.realpath(kubeconfig), folder)]
    return ToolSandbox(read=reads, write=[workdir], hidden=hidden, connect_ports=_server_ports(kubeconfig))


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

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        timeout: float = 60.0,
        max_output: int = 200_000,
        cwd: str | None = None,
        sandbox: ToolSandbox | None = None,
        tables: KubeApi | None = None,
    ) -> None:
        """With a `sandbox`, every child confines itself before exec, and redirections and
        globs (resolved here, in the operator) are held to it too. `tables`: the tools
        identity's API access, which `kubectl get`'s tables are read through (masked)."""
        self.tables = tables
        self.env = dict(env)
        self.timeout = timeout
        self.max_output = max_output
        self.cwd = cwd
        self.sandbox = sandbox
        self._preexec = _with_limits(sandbox.preexec(), timeout) if sandbox is not None else None

    def _permitted(self, path: str, *, write: bool = False) -> bool:
        if self.sandbox is None:
            return True
        full = path if os.path.isabs(path) else os.path.join(self.cwd or os.getcwd(), path)
        return self.sandbox.permits(full, write=write)

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

    def _argv(self, stage: Stage) -> tuple[list[str], OutputPlan | None]:
        """(executable, then argv with the name as typed; how kubectl's data output is masked)."""
        argv: list[str] = []
        for i, arg in enumerate(stage.argv):
            if i in stage.glob_args:
                found = list(itertools.islice(glob.iglob(arg, root_dir=self.cwd), MAX_GLOB_MATCHES + 1))
                if len(found) > MAX_GLOB_MATCHES:
                    raise _Refused(f"{arg}: matches more than {MAX_GLOB_MATCHES} names; narrow the pattern")
                matches = [m for m in sorted(found) if self._permitted(m)]
                argv.extend(matches or [arg])  # bash leaves a pattern without matches as-is
            else:
                argv.append(arg)
        argv, plan = _kubectl_plan(argv)
        program = argv[0]
        resolved = program if "/" in program else shutil.which(program, path=self.env.get("PATH"))
        if not resolved:
            raise _Refused(f"{program}: command not found")
        return [resolved, *argv], plan

    async def _run_pipeline(self, pipeline: Pipeline, timeout: float, budget: int) -> RunResult:
        """Start every stage; each stage's output reaches the next one only after `redact`.

        Why not plain pipes: a filter that transforms text (`rev`, `tr`, `cut -c`, jq's
        `explode`) would hand the final redaction a shape it cannot recognise. Redacting each
        stage's output before the next stage reads it means filters only see redacted text
        (see `bash_policy`). The cost is that a stage's output is buffered, up to
        `RELAY_CAP` bytes, before the next stage starts reading.
        """
        procs: list[asyncio.subprocess.Process] = []
        side_tasks: list[asyncio.Task[Any]] = []
        stderr_tasks: list[asyncio.Task[bytes]] = []
        # fail before starting anything; globs expand off the event loop (a deep one takes long)
        planned = [
            await asyncio.to_thread(self._argv, stage) if stage.glob_args else self._argv(stage)
            for stage in pipeline.stages
        ]
        argvs = [argv for argv, _ in planned]
        plans = [plan for _, plan in planned]
        try:
            for i, stage in enumerate(pipeline.stages):
                opened: list[IO[Any]] = []
                try:
                    stdin: Any = asyncio.subprocess.PIPE if i else asyncio.subprocess.DEVNULL
                    stdout: Any = asyncio.subprocess.PIPE
                    stderr: Any = asyncio.subprocess.PIPE
                    if i < len(pipeline.stages) - 1 and i < len(pipeline.stderr_piped) and pipeline.stderr_piped[i]:
                        stderr = asyncio.subprocess.STDOUT  # `|&`
                    stdin, stdout, stderr = self._apply_redirects(stage, stdin, stdout, stderr, opened)
                    proc = await asyncio.create_subprocess_exec(
                        *argvs[i][1:],
                        executable=argvs[i][0],
                        stdin=stdin,
                        stdout=stdout,
                        stderr=stderr,
                        env=self.env,
                        cwd=self.cwd,
                        start_new_session=True,
                        preexec_fn=self._preexec,
                    )
                finally:
                    for handle in opened:
                        handle.close()  # the child holds its own copy
                procs.append(proc)
                if proc.stderr is not None:
                    stderr_tasks.append(asyncio.ensure_future(_read_capped(proc.stderr, 20_000)))
                if i:
                    side_tasks.append(
                        asyncio.ensure_future(
                            _relay_redacted(procs[i - 1], proc, argvs[i - 1][1], plans[i - 1], self.tables)
                        )
                    )
            return await self._collect(procs, side_tasks, stderr_tasks, timeout, budget, plans[-1])
        except BaseException:
            for proc in procs:
                _kill(proc)
            for task in [*stderr_tasks, *side_tasks]:
                task.cancel()
            raise

    def _apply_redirects(
        self, stage: Stage, stdin: Any, stdout: Any, stderr: Any, opened: list[IO[Any]]
    ) -> tuple[Any, Any, Any]:
        for r in stage.redirects:
            if r.op == "dup":
                if r.fd == 2 and r.target == 1:
                    stderr = asyncio.subprocess.STDOUT if stdout in (asyncio.subprocess.PIPE,) else stdout
                elif r.fd == 1 and r.target == 2:
                    stdout = stderr
                continue
            path = str(r.target)
            if not self._permitted(path, write=r.op != "<"):
                raise _Refused(f"{path}: outside what tool processes may {'read' if r.op == '<' else 'write'}")
            if r.op == "<":
                source: IO[bytes] = self._open(path, os.O_RDONLY, "rb")
                opened.append(source)
                stdin = source
                continue
            append = r.op == ">>"
            flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
            sink: IO[bytes] = self._open(path, flags, "ab" if append else "wb")
            opened.append(sink)
            if r.fd in (1, -1):
                stdout = sink
            if r.fd in (2, -1):
                stderr = sink
        return stdin, stdout, stderr

    def _resolve(self, path: str) -> str:
        return path if os.path.isabs(path) or self.cwd is None else os.path.join(self.cwd, path)

    def _open(self, path: str, flags: int, mode: str) -> IO[bytes]:
        """Opens the path the sandbox check resolved, never following a symlink put in its
        place since (a concurrent call could try)."""
        target = os.path.realpath(self._resolve(path)) if self.sandbox is not None else self._resolve(path)
        nofollow = os.O_NOFOLLOW if self.sandbox is not None else 0
        return os.fdopen(os.open(target, flags | nofollow | os.O_CLOEXEC, 0o644), mode)

    async def _collect(
        self,
        procs: list[asyncio.subprocess.Process],
        side_tasks: list[asyncio.Task[Any]],
        stderr_tasks: list[asyncio.Task[bytes]],
        timeout: float,
        budget: int,
        plan: OutputPlan | None = None,
    ) -> RunResult:
        last = procs[-1]
        rendered_budget = budget
        if plan is not None:
            # kubectl's JSON is rendered only once complete: read it whole (to RELAY_CAP), not
            # cut at the tool's output budget, which applies to what is rendered.
            budget = RELAY_CAP

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

        tasks = [asyncio.ensure_future(read_stdout()), *side_tasks, *(asyncio.ensure_future(p.wait()) for p in procs)]
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
        if plan is not None:
            text = await _render(plan, text, cut=truncated, tables=self.tables)
            truncated = len(text) > rendered_budget
            text = text[:rendered_budget]
        if errors:
            text += ("" if not text or text.endswith("\n") else "\n") + "".join(errors)
        code = last.returncode if last.returncode is not None else -1
        if truncated:
            code = 0 if code < 0 else code
        return RunResult(text, code, timed_out=timed_out, truncated=truncated)


RELAY_CAP = 16 * 1024 * 1024
MAX_GLOB_MATCHES = 10_000
"""A glob is expanded in a worker thread and stops here (a deep one could take long)."""


def _kubectl_plan(argv: list[str]) -> tuple[list[str], OutputPlan | None]:
    """The argv to run (kubectl asked for JSON instead of a data format) and its plan; the
    first kubectl of the argv counts, also behind a wrapper (`timeout 5 kubectl ...`)."""
    for i, arg in enumerate(argv):
        if arg.rsplit("/", 1)[-1] == "kubectl":
            try:
                plan = output_plan(argv[i:])
            except KubectlOutputRefused as exc:
                raise _Refused(str(exc)) from None
            return ([*argv[:i], *plan.argv], plan) if plan else (argv, None)
    return argv, None


async def _render(plan: OutputPlan, text: str, *, cut: bool, tables: KubeApi | None = None) -> str:
    if cut:
        return f"[kubectl printed more than {RELAY_CAP} bytes; withheld: narrow the query with -l, --field-selector or a name]\n"
    if plan.format == "table":
        return await render_table_output(plan, text, tables)
    if len(text) < 4096:
        return render_output(plan, text)
    return await asyncio.to_thread(render_output, plan, text)


async def _relay_redacted(
    producer: asyncio.subprocess.Process,
    consumer: asyncio.subprocess.Process,
    name: str,
    plan: OutputPlan | None = None,
    tables: KubeApi | None = None,
) -> None:
    """Feed `producer`'s whole output, redacted, to `consumer`'s stdin (then close it);
    kubectl's data rendered from masked objects first (`plan`)."""
    sink = consumer.stdin
    try:
        if producer.stdout is not None:
            data = await _read_capped(producer.stdout, RELAY_CAP)
            raw = data.decode("utf-8", errors="replace")
            if plan is not None:
                raw = await _render(plan, raw, cut=len(data) >= RELAY_CAP, tables=tables)
            text = await redact_async(raw, limit=RELAY_CAP)
            if len(data) >= RELAY_CAP:
                _kill(producer)
                text += f"\n[output of {name} cut at {RELAY_CAP} bytes]\n"
            if sink is not None:
                sink.write(text.encode())
                await sink.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the consumer stopped reading (`head`): like SIGPIPE in a shell
    finally:
        if sink is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
                sink.close()


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> bytes:
    """Read to EOF (so the writer never blocks) but keep only the first `cap` bytes."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept)


# What one tool process may use (a run's command is attacker-steerable): address space (Go's
# kubectl reserves lazily and runs well within it), the file size it may write in its work
# folder, processes, open files; CPU seconds just past the call's time limit. RLIMIT_NPROC
# counts every process and thread of the user, the operator's own included (and kubectl's Go
# threads), so it is a fork-bomb stop, not a tight bound (and root is exempt from it).
TOOL_LIMITS = {
    resource.RLIMIT_AS: 4 << 30,
    resource.RLIMIT_FSIZE: 64 << 20,
    resource.RLIMIT_NPROC: 4096,
    resource.RLIMIT_NOFILE: 1024,
}


def _with_limits(confine: Any, timeout: float) -> Any:
    limits = [*TOOL_LIMITS.items(), (resource.RLIMIT_CPU, int(timeout) + 5)]
    setrlimit = resource.setrlimit

    def preexec() -> None:
        for which, value in limits:
            setrlimit(which, (value, value))
        confine()

    return preexec


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group id is its pid


def confined_runner(
    *,
    env: Mapping[str, str] | None = None,
    kubeconfig: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    max_output: int = 200_000,
    cwd: str | None = None,
    tables: KubeApi | None = None,
) -> BashRunner | None:
    """The runner of the bash tool: allowlisted environment, private working folder, Landlock
    sandbox; None when the kernel cannot confine the children (then nothing may run).
    `tables`: the same identity's API access for `kubectl get`'s masked tables (by default
    made from `kubeconfig`; never from the operator's own credentials)."""
    extra = dict(env or {})
    kubeconfig = str(kubeconfig or extra.pop("KUBECONFIG", "") or "") or None
    workdir = cwd or _process_workdir()
    child_env = default_bash_env({**extra, "HOME": workdir})
    if kubeconfig:
        child_env["KUBECONFIG"] = kubeconfig
    sandbox = bash_sandbox(child_env, workdir, kubeconfig)
    if not sandbox.available:
        return None
    if tables is None and kubeconfig:
        tables = _tables_api(kubeconfig)
    return BashRunner(child_env, timeout=timeout, max_output=max_output, cwd=workdir, sandbox=sandbox, tables=tables)


def _tables_api(kubeconfig: str) -> KubeApi:
    from lestrade.kube import make_api_client  # noqa: PLC0415 (the kubeconfig is always given: never the operator's)

    return KubeApi(make_api_client(kubeconfig))


_NO_SANDBOX = (
    "the bash tool is unavailable: this kernel has no Landlock (Linux 5.13+), which keeps tool "
    "processes away from the operator's credentials; use the kubectl_* tools"
)


def bash_toolset(
    *,
    env: Mapping[str, str] | None = None,
    kubeconfig: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    max_output: int = 200_000,
    cwd: str | None = None,
    api_client: ApiClient | None = None,
) -> Toolset:
    """The `bash` tool. `kubeconfig`: the tools identity's (also taken from `env`'s KUBECONFIG);
    `api_client`: the same identity's client, which `kubectl get`'s tables are read through;
    kubectl gets no other credentials. `env` is added to the allowlisted environment; `cwd` is
    the private folder in which each call gets its own fresh work folder (and HOME), the only
    place its processes may write, removed after the call."""
    # Each call gets a fresh, private (0700) work folder inside `cwd` (the operator gives the
    # tools identity's folder, which every run of a scope shares), also its $HOME and the only
    # place it may write, removed after the call: nothing one call writes (`~/.jq`, kubectl's
    # cache, a planted file) is there for the next call, nor for another run.
    config = str(kubeconfig or (env or {}).get("KUBECONFIG", "") or "") or None
    tables = KubeApi(api_client) if api_client is not None else _tables_api(config) if config else None
    runner = confined_runner(
        env=env, kubeconfig=kubeconfig, timeout=timeout, max_output=max_output, cwd=cwd, tables=tables
    )

    @contextlib.contextmanager
    def call_runner() -> Any:
        if runner is None:
            yield runner
            return
        folder = tempfile.mkdtemp(prefix="lestrade-call-", dir=cwd or _process_workdir())
        try:
            yield confined_runner(
                env=env, kubeconfig=kubeconfig, timeout=timeout, max_output=max_output, cwd=folder, tables=tables
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def approval(p: Params) -> bool:
        _, verdict = evaluate_text(p.opt_str("command") or "")
        # A forbidden command is refused outright: asking a human to approve it would be moot.
        return verdict.needs_approval and not verdict.forbidden

    def read_only(params: dict[str, Any]) -> bool:
        # What runs unattended is, by the grammar, a read (kubectl get, grep, jq, ...): safe to
        # run again after a restart. Anything a person approved may have changed something.
        _, verdict = evaluate_text(str(params.get("command") or ""))
        return not verdict.needs_approval and not verdict.forbidden

    async def run(p: Params) -> ToolOutput:
        command = p.required("command")
        line, verdict = evaluate_text(command)
        if verdict.forbidden:  # never runs, so it never asks for approval either
            return ToolOutput(status="error", error=f"refused: {verdict.forbidden}")
        if line is None:
            return ToolOutput(status="error", error=f"refused: {verdict.reason}")
        if runner is None:
            return ToolOutput(status="error", error=_NO_SANDBOX)
        with call_runner() as fresh:
            try:
                result = await fresh.run(line)
            except _Refused as exc:
                return ToolOutput(status="error", error=f"refused: {exc}")
            except OSError as exc:
                return ToolOutput(status="error", error=f"{type(exc).__name__}: {exc}")
        text = result.output
        if result.truncated:
            text += f"\n[output truncated at {max_output} bytes]"
        if result.timed_out:
            return ToolOutput(
                status="error", data=text, error=f"timed out after {timeout:.0f}s; partial output:\n{text}"
            )
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
        read_only=read_only,
    )
    return Toolset(
        name="bash",
        tools=[tool],
        instructions=_INSTRUCTIONS,
        summary="kubectl | grep, awk, jq pipelines",
    )
