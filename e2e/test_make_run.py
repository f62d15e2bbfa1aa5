"""`make run` end to end: everything comes up, kubectl works, Ctrl-C leaves nothing behind.

Runs `python -m lestrade.cli run` (what `make run` runs after its build steps) in a scratch
directory, exactly as a user would, and drives it with kubectl and HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from lestrade.localcluster import binary_path
from lestrade.localcluster.cluster import free_port
from lestrade.localcluster.processes import wait_until

REPO = Path(__file__).resolve().parents[1]


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def running(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "LESTRADE_MODEL_LIST")}
    env.update(LESTRADE_API_PORT=str(port), PYTHONUNBUFFERED="1")
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "lestrade.cli", "run"], cwd=tmp_path, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"make run exited: {(tmp_path / 'run.log').read_text()}")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                return r.status == 200

        wait_until("make run to serve /readyz", ready, 180)
        yield proc, tmp_path, port
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def test_make_run_brings_everything_up_and_ctrl_c_cleans_up(running) -> None:
    proc, workdir, port = running
    kubeconfig = workdir / ".lestrade" / "kubeconfig"
    assert kubeconfig.exists()
    cache = workdir / "kubectl-cache"  # not ~/.kube/cache: ports of earlier clusters get reused
    kubectl = [str(binary_path("kubectl")), f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}"]

    crds = subprocess.run([*kubectl, "get", "crd", "-o", "name"], capture_output=True, text=True, check=True)
    assert "investigations.lestrade.dev" in crds.stdout
    assert "conversations.lestrade.dev" in crds.stdout
    listing = subprocess.run([*kubectl, "get", "lestrade", "-A"], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
        assert json.load(response)["status"] == "ready"
    output = (workdir / "run.log").read_text()
    assert "DEMO model" in output and "export KUBECONFIG=" in output

    family = _descendants(proc.pid)
    assert len(family) >= 7  # 5 control-plane processes, demo model, operator, API
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    wait_until("every child to exit", lambda: not any(_alive(p) for p in family), 30)
