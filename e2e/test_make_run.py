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
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lestrade.localcluster.build import cache_root
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


def _poison_discovery_cache(cache_dir: Path, server: str) -> None:
    """What an earlier cluster on the same host:port leaves in kubectl's cache: a fresh (under
    six hours) discovery without the Lestrade resources, as kubectl itself writes it."""
    folder = cache_dir / "discovery" / server.removeprefix("https://").replace(":", "_")
    groups = [("", "v1"), ("apiextensions.k8s.io", "apiextensions.k8s.io/v1")]
    resources = {
        "v1": [
            {
                "name": "namespaces",
                "singularName": "namespace",
                "namespaced": False,
                "kind": "Namespace",
                "verbs": ["get", "list"],
                "shortNames": ["ns"],
            }
        ],
        "apiextensions.k8s.io/v1": [
            {
                "name": "customresourcedefinitions",
                "singularName": "customresourcedefinition",
                "namespaced": False,
                "kind": "CustomResourceDefinition",
                "verbs": ["get", "list"],
                "shortNames": ["crd", "crds"],
            }
        ],
    }
    folder.mkdir(parents=True)
    (folder / "servergroups.json").write_text(
        json.dumps(
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": name,
                        "versions": [{"groupVersion": gv, "version": "v1"}],
                        "preferredVersion": {"groupVersion": gv, "version": "v1"},
                    }
                    for name, gv in groups
                ],
            }
        )
    )
    for gv, listed in resources.items():
        (folder / gv).mkdir(parents=True)
        (folder / gv / "serverresources.json").write_text(
            json.dumps({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": listed})
        )


@dataclass
class Run:
    proc: subprocess.Popen[bytes]
    workdir: Path
    port: int
    home: Path
    kubecachedir: Path


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Run]:
    """`make run` as a user runs it, in a home whose kubectl caches (both `~/.kube/cache` and
    `$KUBECACHEDIR`) hold a stale discovery of the host:port its kube-apiserver will use."""
    yield from _make_run(tmp_path)


def _make_run(tmp_path: Path, extra_env: dict[str, str] | None = None) -> Iterator[Run]:
    port, apiserver_port = free_port(), free_port()
    home, kubecachedir = tmp_path / "home", tmp_path / "kubecache"
    for cache in (home / ".kube" / "cache", kubecachedir):
        _poison_discovery_cache(cache, f"https://127.0.0.1:{apiserver_port}")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "LESTRADE_MODEL_LIST")}
    env.update(
        LESTRADE_API_PORT=str(port),
        LESTRADE_APISERVER_PORT=str(apiserver_port),
        PYTHONUNBUFFERED="1",
        HOME=str(home),
        KUBECACHEDIR=str(kubecachedir),
        LESTRADE_CACHE_DIR=str(cache_root()),  # the binaries built before, not in the new home
        **(extra_env or {}),
    )
    log_path = tmp_path / "run.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lestrade.cli", "run"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        # Ready as a newcomer sees it: "Lestrade is running" printed, which `lestrade run` says only
        # once the API answers /readyz *and* a dry-run Investigation passes admission stamped with
        # its creator (the API can be ready before the operator's admission policies serve: a
        # kubectl apply then got "kind not found"). Polled; a `make run` that exits fails at once.
        deadline = time.monotonic() + 180
        while "Lestrade is running" not in log_path.read_text() or not _serves(f"http://127.0.0.1:{port}/readyz"):
            assert proc.poll() is None, f"make run exited ({proc.returncode}): {log_path.read_text()}"
            assert time.monotonic() < deadline, f"make run was not ready in 180s: {log_path.read_text()}"
            time.sleep(0.2)
        yield Run(proc, tmp_path, port, home, kubecachedir)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_make_run_brings_everything_up_and_ctrl_c_cleans_up(running: Run) -> None:
    proc, workdir, port = running.proc, running.workdir, running.port
    kubeconfig = workdir / ".lestrade" / "kubeconfig"
    assert kubeconfig.exists()
    # The README's quickstart, with the kubectl `make run` links and the user's own caches: once
    # through $KUBECACHEDIR, once through ~/.kube/cache; both held a stale discovery.
    kubectl = str(workdir / ".lestrade" / "bin" / "kubectl")
    user_env = {"PATH": os.environ["PATH"], "HOME": str(running.home), "KUBECONFIG": str(kubeconfig)}
    for env in ({**user_env, "KUBECACHEDIR": str(running.kubecachedir)}, user_env):
        crds = subprocess.run([kubectl, "get", "crd", "-o", "name"], env=env, capture_output=True, text=True)
        assert crds.returncode == 0, crds.stderr
        assert "investigations.lestrade.dev" in crds.stdout
        assert "conversations.lestrade.dev" in crds.stdout
        listing = subprocess.run([kubectl, "get", "lestrade", "-A"], env=env, capture_output=True, text=True)
        assert listing.returncode == 0, listing.stderr
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
        assert json.load(response)["status"] == "ready"
    # "Lestrade is running" waited for the operator's model client too: the first chat pays only
    # the model's own time (operator/readiness.py), not litellm's import.
    assert "model client ready in" in (workdir / ".lestrade" / "logs" / "operator.log").read_text()
    # The README's HTTP quickstart: the model list, then a chat answered by the demo model.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/model", timeout=10) as response:
        assert json.load(response)["model_name"]
    chat = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/chat",
        method="POST",
        data=json.dumps({"ask": "Which pods are crash-looping?"}).encode(),
        headers={"Content-Type": "application/json"},
    )  # as the README's `-H "$J"`
    with urllib.request.urlopen(chat, timeout=120) as response:
        answer = json.load(response)
    assert "Demo model" in answer["analysis"] and answer["conversation_id"]
    # `kubectl lestrade`: the plugin `make run` puts beside its kubectl, found by kubectl on PATH.
    plugin_env = {**user_env, "PATH": f"{workdir / '.lestrade' / 'bin'}:{os.environ['PATH']}"}
    runs = subprocess.run(["kubectl", "lestrade", "list", "-A"], env=plugin_env, capture_output=True, text=True)
    assert runs.returncode == 0, runs.stderr
    assert answer["conversation_id"] in runs.stdout and "Answered" in runs.stdout
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:  # the console
        assert b"/console/app.js" in response.read()
    output = (workdir / "run.log").read_text()
    assert "DEMO model" in output and "export KUBECONFIG=" in output
    # The tools act as a read-only ServiceAccount, never with this admin kubeconfig.
    assert "tools act as the read-only ServiceAccount default/lestrade-tools" in output
    can = subprocess.run(
        [kubectl, "auth", "can-i", "get", "secrets", "-A", "--as=system:serviceaccount:default:lestrade-tools"],
        env=user_env,
        capture_output=True,
        text=True,
    )
    assert can.stdout.strip() == "no"

    family = _descendants(proc.pid)
    assert len(family) >= 7  # 5 control-plane processes, demo model, operator, API
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    wait_until("every child to exit", lambda: not any(_alive(p) for p in family), 30)
