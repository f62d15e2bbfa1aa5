"""What `make run` and the tests build, and that independent components build side by side.

A fake `go` (a script on PATH) stands in for the toolchain: it writes each requested binary and,
for `go build`, records that it started and waits until the expected number of builds have
started, so the test fails (the build times out) unless the builds overlap.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lestrade.localcluster.build import BuildError, build_plan, component_names, ensure_binaries
from lestrade.localcluster.versions import KUBERNETES_VERSION, RUN_COMPONENTS

ROOT = Path(__file__).resolve().parents[2]

FAKE_GO = textwrap.dedent("""\
    #!{python}
    import os, pathlib, socket, sys
    args = sys.argv[1:]
    root = pathlib.Path(os.environ["FAKE_GO_ROOT"])
    with open(root / "calls", "a") as calls:
        calls.write(" ".join(args) + "\\n")
    if args[:2] == ["env", "GOMODCACHE"]:
        print(root / "modcache")
    elif args[:2] == ["mod", "download"]:
        version = args[-1].split("@")[1]
        mod = root / "modcache" / "cache" / "download" / "k8s.io" / "kubernetes" / "@v" / f"{{version}}.mod"
        mod.parent.mkdir(parents=True, exist_ok=True)
        mod.write_text("module k8s.io/kubernetes\\nreplace (\\n\\tk8s.io/api => ./staging/src/k8s.io/api\\n)\\n")
    elif args[:2] == ["list", "-m"]:
        print(root / "source")
    elif args[:1] == ["build"]:
        out = pathlib.Path(args[args.index("-o") + 1])
        started, running = root / "started", root / "running"
        started.mkdir(exist_ok=True)
        running.mkdir(exist_ok=True)
        if any(running.iterdir()):
            (root / "overlapped").touch()
        (started / out.parent.name).touch()
        (running / out.parent.name).touch()
        if os.environ.get("FAKE_GO_OVERLAP", "1") == "2":
            # The other component's build must start too: the first to get here listens on a
            # Unix socket (its name linked into place only once it listens, so whoever finds
            # the name can connect), the second connects. Relative names: a socket path is
            # short.
            os.chdir(root)
            listener = socket.socket(socket.AF_UNIX)
            mine = f"meet-{{os.getpid()}}.sock"
            listener.bind(mine)
            listener.listen(1)
            try:
                os.link(mine, "meet.sock")
            except FileExistsError:
                socket.socket(socket.AF_UNIX).connect("meet.sock")
            else:
                listener.settimeout(60)
                try:
                    listener.accept()
                except TimeoutError:
                    sys.exit("builds did not overlap")
            finally:
                os.unlink(mine)
        if len(list(running.iterdir())) > 1:  # two started at once: neither saw the other at its start
            (root / "overlapped").touch()
        out.write_text("binary")
        out.chmod(0o755)
        (running / out.parent.name).unlink()
""")


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "go"
    (root / "bin").mkdir(parents=True)
    go = root / "bin" / "go"
    go.write_text(FAKE_GO.format(python=sys.executable))
    go.chmod(0o755)
    # KWOK copies stage and CRD files from its module's source
    for relative in (
        "kustomize/stage/node/fast/node-initialize.yaml",
        "kustomize/stage/node/heartbeat/node-heartbeat.yaml",
        "kustomize/stage/pod/fast/pod-ready.yaml",
        "kustomize/stage/pod/fast/pod-complete.yaml",
        "kustomize/stage/pod/fast/pod-delete.yaml",
        "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml",
        "kustomize/crd/bases/kwok.x-k8s.io_clusterlogs.yaml",
    ):
        (root / "source" / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / "source" / relative).write_text("{}")
    monkeypatch.setenv("FAKE_GO_ROOT", str(root))
    monkeypatch.setenv("LESTRADE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{root / 'bin'}:/usr/bin:/bin")
    monkeypatch.delenv("LESTRADE_BUILD_JOBS", raising=False)
    return root


def test_make_run_builds_the_control_plane_only_with_a_plan_and_steps(fake_go: Path, tmp_path: Path) -> None:
    env = {**os.environ, "FAKE_GO_OVERLAP": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lestrade.localcluster", "build"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = {p.name.rsplit("-", 1)[0] for p in (tmp_path / "cache").iterdir() if p.is_dir()}
    assert built == set(RUN_COMPONENTS)  # no helm, kubeconform, prometheus
    assert (tmp_path / "cache" / f"kubernetes-{KUBERNETES_VERSION}" / "kubectl").exists()
    out = proc.stdout
    # the plan first: what, and about how long cold
    plan = out.splitlines()[0]
    assert re.search(r"building kubernetes \(~\d+m\d+s\), etcd \(~\S+\), kwok \(~\S+\)", plan), out
    assert re.search(r"about \d+m\d\ds on a 2-core machine", plan), out
    # then each step as it starts, and each component's duration
    assert "kubernetes: compiling kube-apiserver (1/4)" in out and "kubernetes: compiling kubectl (4/4)" in out, out
    assert "etcd: resolving its modules (go mod tidy)" in out, out
    assert all(f"built {name} in" in out for name in RUN_COMPONENTS), out
    # the Makefile's `run` takes exactly that step
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run: deps binaries\b", makefile, re.M)
    assert re.search(r"^binaries:.*\n\t\$\(PY\) -m lestrade.localcluster build\n", makefile, re.M)


def test_independent_components_build_side_by_side(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_GO_OVERLAP", "2")  # each `go build` waits until both have started
    paths = ensure_binaries(["etcd", "kubeconform"])
    assert paths["etcd"].read_text() == "binary" and paths["kubeconform"].read_text() == "binary"
    assert "2 at a time" in capsys.readouterr().out
    assert (fake_go / "overlapped").exists()


def test_one_at_a_time_when_asked(fake_go: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LESTRADE_BUILD_JOBS", "1")
    ensure_binaries(["etcd", "kubeconform"], quiet=True)
    assert len(list((fake_go / "started").iterdir())) == 2
    assert not (fake_go / "overlapped").exists()


def test_names_of_binaries_and_unknown_names(fake_go: Path) -> None:
    assert component_names(["kubectl", "kube-apiserver", "etcd"]) == ["kubernetes", "etcd"]
    with pytest.raises(BuildError, match="unknown component 'kubelet'; known: kubernetes, etcd, kwok"):
        component_names(["kubelet"])
    assert "helm" in build_plan(["helm"]) and build_plan([]) == ""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "lestrade.testing.binaries",
            "-p",
            "no:cacheprovider",
            "-q",
            "-s",
            *args,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ},
    )


def test_tests_build_what_they_use_when_collected(fake_go: Path, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_lint.py").write_text(
        textwrap.dedent("""\
        import pytest
        from lestrade.localcluster import binary_path

        pytestmark = pytest.mark.binaries("kubeconform")

        def test_uses_it():
            assert binary_path("kubeconform").read_text() == "binary"  # built before the test ran
        """)
    )
    (suite / "test_plain.py").write_text("def test_nothing():\n    pass\n")
    cache = tmp_path / "cache"
    plain = _pytest(suite, "test_plain.py")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert not cache.exists() or not any(cache.iterdir()), "an unrelated test built something"
    marked = _pytest(suite)
    assert marked.returncode == 0, marked.stdout + marked.stderr
    assert "building what the selected tests run: kubeconform" in marked.stdout
    assert {p.name.rsplit("-", 1)[0] for p in cache.iterdir() if p.is_dir()} == {"kubeconform"}


# What a test module must declare, by what it uses: the binary itself, or a helper that runs it.
USES = {
    "helm": re.compile(
        r'binary_path\("helm"\)|ensure_binaries\(\["helm"\]|local_release|LocalRelease|'
        r"from test_chart_hardening import|def \w+\([^)]*\bdeployed\b"
    ),
    "kubeconform": re.compile(r'binary_path\("kubeconform"\)|ensure_binaries\(\["kubeconform"\]'),
    "prometheus": re.compile(r"def \w+\([^)]*\bprometheus\b|PrometheusServer\(|recorded_prometheus\("),
    "otelcol": re.compile(r"Collector\(\)|ensure_otelcol\("),
    "alertmanager": re.compile(r"AlertmanagerServer\(|ensure_alertmanager\("),
}


def test_every_test_module_declares_the_binaries_it_runs() -> None:
    undeclared = []
    for module in sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("e2e/**/test_*.py")]):
        if module.name == Path(__file__).name:
            continue
        text = module.read_text()
        declared = set()
        for mark in re.findall(r"mark\.binaries\(([^)]*)\)", text):
            declared.update(re.findall(r'"([\w-]+)"', mark))
        undeclared += [
            f"{module.relative_to(ROOT)} uses {name}"
            for name, use in USES.items()
            if use.search(text) and name not in declared
        ]
    assert not undeclared, "add pytestmark = pytest.mark.binaries(...):\n" + "\n".join(undeclared)
