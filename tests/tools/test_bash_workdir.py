"""Each bash call runs in a fresh private work folder (also its $HOME) that is removed after it,
and under resource limits; only `2>/dev/null` is a redirection that runs unattended (issue 29).
The real tool, the real sandbox and real processes."""

from __future__ import annotations

import pytest

from lestrade.operator.tools.bash.policy import evaluate_text
from lestrade.operator.tools.bash.tool import bash_toolset


@pytest.fixture
def bash():  # type: ignore[no-untyped-def]
    [tool] = bash_toolset(env={"PATH": "/usr/bin:/bin"}, timeout=60).tools
    return tool


async def test_nothing_one_call_writes_is_there_for_the_next(bash) -> None:  # type: ignore[no-untyped-def]
    # `run` is what an approval reaches: these writes would have been approved
    first = await bash.run({"command": "printf 'def planted: 1;' > .jq && printf x > planted && ls -a"})
    assert first.status == "success" and "planted" in first.data and ".jq" in first.data, first
    home = await bash.run({"command": "printenv HOME"})
    second = await bash.run({"command": "ls -a"})
    assert second.data.split() == [".", ".."], second.data
    third = await bash.run({"command": "printenv HOME"})
    assert home.data.strip() and third.data.strip() and home.data != third.data  # a new $HOME each call
    gone = await bash.run({"command": f"ls {home.data.strip()}"})
    assert "No such file" in gone.data or gone.status == "error", gone


async def test_tool_processes_cannot_write_past_the_file_size_limit(bash) -> None:  # type: ignore[no-untyped-def]
    out = await bash.run({"command": "head -c 100000000 /dev/zero > big; wc -c < big"})
    size = int(out.data.strip().splitlines()[-1].split()[0])
    assert size <= 64 << 20, out.data


@pytest.mark.parametrize(
    "command",
    [
        "kubectl get po 2>/tmp/x",
        "kubectl get po 2>x",
        "kubectl get po 2>/dev/nullx",
        "kubectl get po 2>>/dev/null",
        "kubectl get po 2>/dev/null/../../tmp/x",
        "kubectl get po 2>./dev/null",
        "kubectl get po 1>/dev/null",
        "kubectl get po >/dev/null",
        "kubectl get po 2>/dev/stdout",
        "kubectl get po 2>/dev/tty",
    ],
)
def test_only_stderr_to_dev_null_runs_unattended(command: str) -> None:
    _, verdict = evaluate_text(command)
    assert verdict.needs_approval, verdict


def test_stderr_to_dev_null_runs_unattended() -> None:
    assert not evaluate_text("kubectl get po 2>/dev/null")[1].needs_approval


async def test_path_folders_below_the_operators_working_folder_are_not_readable(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 29: a folder on the operator's PATH below its home or working folder (a venv's
    bin, `.lestrade/bin`) was readable by tool processes; only system folders are."""
    monkeypatch.chdir(tmp_path)  # the operator's working folder
    folder = tmp_path / "tools-bin"
    folder.mkdir()
    (folder / "planted").write_text("planted-f1le\n")
    [tool] = bash_toolset(env={"PATH": f"{folder}:/usr/bin:/bin"}, timeout=60).tools
    out = await tool.run({"command": f"cat {folder}/planted"})
    assert "planted-f1le" not in out.text() and "ermission denied" in out.text(), out.text()
    control = await tool.run({"command": "cat /etc/hostname"})
    assert control.status == "success", control.text()
