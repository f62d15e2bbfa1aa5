"""The bash tool runs argv pipelines with real processes, and never through a shell."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from lestrade.operator.tools.bash.parse import parse_command
from lestrade.operator.tools.bash.tool import BashRunner, bash_toolset, default_bash_env


@pytest.fixture
def bash():
    return bash_toolset(timeout=10).tools[0]


async def test_pipeline_of_real_processes(bash) -> None:
    out = await bash.run({"command": "printf 'b\\na\\nc\\na\\n' | sort | uniq -c | sort -rn | head -n 1"})
    assert out.status == "success"
    assert out.data.split() == ["2", "a"]


async def test_and_or_sequences_follow_exit_status(bash) -> None:
    out = await bash.run({"command": "false && echo skipped || echo recovered; echo last"})
    assert out.data.splitlines() == ["recovered", "last"]


async def test_shell_metacharacters_in_quotes_are_plain_arguments(bash, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    out = await bash.run({"command": f"echo 'x; touch {marker}' \"$(touch {marker})\""})
    # $(...) cannot run without a shell: refused, and nothing was executed
    assert out.status == "error" and "without a shell" in (out.error or "")
    assert not marker.exists()
    out = await bash.run({"command": f"echo 'x; touch {marker}'"})
    assert out.data.strip() == f"x; touch {marker}"
    assert not marker.exists()


async def test_stderr_and_exit_code_are_reported(bash) -> None:
    out = await bash.run({"command": "ls /definitely-not-here"})
    assert "No such file" in out.data
    assert "(exit code 2)" in out.data


async def test_stderr_can_be_merged_into_the_pipe(bash) -> None:
    out = await bash.run({"command": "ls /definitely-not-here 2>&1 | wc -l"})
    assert out.data.strip().splitlines()[0] == "1"


async def test_output_is_redacted(bash) -> None:
    out = await bash.run({"command": "echo DB_PASSWORD=hunter2-s3cret"})
    assert "hunter2-s3cret" not in out.data
    assert "DB_PASSWORD=[REDACTED]" in out.data


async def test_forbidden_command_never_runs_and_needs_no_approval(bash) -> None:
    params = {"command": "kubectl get secret db -o yaml"}
    assert bash.needs_approval(params) is False
    out = await bash.run(params)
    assert out.status == "error" and "Secret data" in (out.error or "")


async def test_approved_command_runs_as_argv(tmp_path: Path) -> None:
    bash = bash_toolset(timeout=10, cwd=str(tmp_path)).tools[0]
    params = {"command": "touch made-by-approved-command && ls"}
    assert bash.needs_approval(params) is True
    out = await bash.run(params)  # the agent loop calls run() only after approval
    assert out.status == "success" and out.data.split() == ["made-by-approved-command"], out.text()
    assert list(tmp_path.iterdir()) == []  # the call's own folder (inside cwd) went with the call


async def test_approved_redirection_writes_the_file(tmp_path: Path) -> None:
    bash = bash_toolset(timeout=10, cwd=str(tmp_path)).tools[0]
    params = {"command": "echo hello > out.txt; cat out.txt"}
    assert bash.needs_approval(params)
    out = await bash.run(params)
    assert out.data == "hello\n", out.text()
    # written in the call's own folder: not in `cwd` itself, which it may not write
    out = await bash.run({"command": f"echo x > {tmp_path}/out.txt"})
    assert out.status == "error" and "outside what tool processes may write" in (out.error or "")


async def test_even_approved_commands_write_only_in_the_working_folder(bash, tmp_path: Path) -> None:
    # The fixture's working folder is a private one, not tmp_path.
    touched, redirected = tmp_path / "touched", tmp_path / "redirected"
    out = await bash.run({"command": f"touch {touched}"})
    assert "Permission denied" in out.text()
    out = await bash.run({"command": f"echo x > {redirected}"})
    assert out.status == "error" and "outside what tool processes may write" in (out.error or "")
    assert not touched.exists() and not redirected.exists()


async def test_unknown_program_is_reported(bash) -> None:
    out = await bash.run({"command": "no-such-program-xyz --help"})
    assert out.status == "error" and "command not found" in (out.error or "")


async def test_children_get_a_minimal_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    runner = BashRunner(default_bash_env({"EXTRA": "1"}), timeout=10)
    result = await runner.run(parse_command("env"))
    assert "OPENAI_API_KEY" not in result.output
    assert "EXTRA=1" in result.output


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


async def test_timeout_kills_the_whole_pipeline(tmp_path: Path) -> None:
    runner = BashRunner(default_bash_env(), timeout=1.0)
    started = time.monotonic()
    result = await runner.run(parse_command("sleep 37.0123 | cat"))
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - started < 10
    ps = subprocess.run(["pgrep", "-f", "sleep 37.0123"], capture_output=True, text=True).stdout.split()
    assert not [pid for pid in ps if _alive(int(pid))]


async def test_output_cap_stops_an_endless_producer() -> None:
    runner = BashRunner(default_bash_env(), timeout=20, max_output=10_000)
    result = await asyncio.wait_for(runner.run(parse_command("yes")), 20)
    assert result.truncated
    assert len(result.output) == 10_000


async def test_each_stage_output_is_redacted_before_the_next_stage(bash) -> None:
    out = await bash.run({"command": "printf 'DB_PASSWORD=hunter2\\nLEVEL=debug\\n' | rev"})
    assert out.status == "success", out.text()
    assert out.data.splitlines() == ["]DETCADER[=DROWSSAP_BD", "gubed=LEVEL"]


async def test_a_large_stage_output_reaches_the_next_stage_whole() -> None:
    # ~5.7 MB, more than one `redact` call keeps by default: the relay redacts it all
    tool = bash_toolset(timeout=60).tools[0]
    out = await tool.run(
        {"command": "awk 'BEGIN{for(i=0;i<300000;i++) print \"line password=x\" i}' | grep -c REDACTED"}
    )
    assert out.status == "success", out.text()
    assert out.data.strip() == "300000"
