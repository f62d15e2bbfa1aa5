"""Starting and stopping: no stray processes, clear errors when the toolchain is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lestrade.localcluster import BuildError, LocalCluster
from lestrade.localcluster.build import ensure_component


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is gone for our purposes once reaped
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_stop_leaves_no_process_and_no_data(tmp_path) -> None:
    cluster = LocalCluster.start(nodes=1)
    pids = cluster.process_ids()
    data_dir = cluster.data_dir
    assert len(pids) == 5  # etcd, apiserver, controller-manager, scheduler, kwok
    assert all(_alive(pid) for pid in pids)
    cluster.stop()
    assert not any(_alive(pid) for pid in pids)
    assert not data_dir.exists()


def test_killing_python_takes_the_control_plane_down(tmp_path) -> None:
    """Even `kill -9` of the Python parent leaves nothing behind (parent-death signal)."""
    script = (
        "import sys; from lestrade.localcluster import LocalCluster; "
        "c = LocalCluster.start(nodes=1); print(*c.process_ids(), flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 5, line
        proc.kill()
        proc.wait(10)
        from lestrade.localcluster.processes import wait_until

        wait_until("children to exit", lambda: not any(_alive(p) for p in pids), 30)
    finally:
        proc.kill()


def test_missing_go_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LESTRADE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no `go` here
    with pytest.raises(BuildError) as error:
        ensure_component("kwok", quiet=True)
    assert "Go is not installed" in str(error.value)
    assert "LESTRADE_TEST_KUBECONFIG" in str(error.value)


def test_failed_build_names_its_log(tmp_path, monkeypatch) -> None:
    fake_go = tmp_path / "bin" / "go"
    fake_go.parent.mkdir()
    fake_go.write_text("#!/bin/sh\necho 'go: module lookup disabled' >&2\nexit 1\n")
    fake_go.chmod(0o755)
    monkeypatch.setenv("LESTRADE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{fake_go.parent}:/usr/bin:/bin")
    with pytest.raises(BuildError) as error:
        ensure_component("kwok", quiet=True)
    message = str(error.value)
    assert "Full log:" in message and "kwok-0.8.0.build.log" in message
    assert "module lookup disabled" in message
