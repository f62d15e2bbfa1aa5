"""The Dockerfile keeps its promises, checked against the files it builds from (no container
engine needed): bases pinned by digest, Python dependencies exactly from uv.lock, kubectl from
the pinned build, nothing but the venv and kubectl in the final stage, non-root with the UID the
chart runs as, and what a read-only root filesystem needs."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lestrade.localcluster.versions import COMPONENTS, KUBERNETES_VERSION

REPO = Path(__file__).resolve().parents[2]
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The global ARG defaults and the stages (instruction keyword, arguments), continuation
    lines joined and comments dropped."""
    lines: list[str] = []
    for raw in text.splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + raw.strip()
        else:
            lines.append(raw.strip())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            base = words[0]
            stages.append(Stage(base, words[2] if len(words) > 2 and words[1].upper() == "AS" else None))
        elif keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


ARGS, STAGES = parse((REPO / "Dockerfile").read_text())
BY_NAME = {s.name: s for s in STAGES}
FINAL = STAGES[-1]


def resolve(base: str) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: ARGS[m.group(1)], base)


def test_every_base_is_pinned_by_digest_and_matches_the_project() -> None:
    bases = {resolve(s.base) for s in STAGES}
    assert bases and all(DIGEST.search(b) for b in bases), bases
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    python = re.search(r">=(\d+\.\d+)", project["requires-python"]).group(1)  # type: ignore[union-attr]
    assert f"/python:{python}-" in ARGS["PYTHON_BASE"], (python, ARGS["PYTHON_BASE"])
    # the Go base must be at least the Go the pinned build's go.mod asks for
    build = (REPO / "lestrade" / "localcluster" / "build.py").read_text()
    go = re.search(r'"go (\d+)\.(\d+)\.\d+"', build)
    image_go = re.search(r"/golang:(\d+)\.(\d+)-", ARGS["GO_BASE"])
    assert go and image_go and tuple(map(int, image_go.groups())) >= tuple(map(int, go.groups()))


def test_python_dependencies_come_from_the_lock_file_only() -> None:
    venv = BY_NAME["venv"]
    assert resolve(venv.base) == resolve(FINAL.base), "the venv's interpreter must be the final stage's"
    syncs = [shlex.split(run) for run in venv.all("RUN") if " sync " in f" {run} "]
    assert len(syncs) == 2 and all({"--frozen", "--no-dev"} <= set(s) for s in syncs), syncs
    assert "--no-editable" in syncs[-1]  # the project is a wheel in site-packages: no source needed
    copies = " ".join(venv.all("COPY"))
    assert "uv.lock" in copies and "pyproject.toml" in copies
    env = " ".join(venv.all("ENV"))
    assert "UV_PYTHON_DOWNLOADS=never" in env  # never a Python other than the base's
    # uv itself at the version the Makefile pins
    uv_version = re.search(r"^UV_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)  # type: ignore[union-attr]
    assert any(f"uv=={uv_version}" in run for run in venv.all("RUN"))
    # no other installer runs anywhere
    for stage in STAGES:
        for run in stage.all("RUN"):
            assert "pip install" not in run or f"uv=={uv_version}" in run, run


def test_kubectl_is_built_from_the_pinned_versions() -> None:
    stage = BY_NAME["kubectl"]
    copied = " ".join(stage.all("COPY"))
    assert "lestrade/localcluster/versions.py" in copied and "lestrade/localcluster/build.py" in copied
    (run,) = [r for r in stage.all("RUN") if "build_only" in r]
    assert "build_only('kubernetes', ['kubectl'], '/out')" in run
    assert "kubectl" in COMPONENTS["kubernetes"].packages and KUBERNETES_VERSION
    assert any(c == "--from=kubectl /out/kubectl /usr/local/bin/kubectl" for c in FINAL.all("COPY"))


def test_the_final_stage_has_no_toolchain_and_runs_as_the_charts_user() -> None:
    copies = FINAL.all("COPY")
    assert sorted(c.split()[0] for c in copies) == ["--from=kubectl", "--from=venv"], copies
    for run in FINAL.all("RUN"):
        for tool in ("apt-get", "apk", "pip", "uv ", "gcc", "make", "go ", "curl", "wget"):
            assert tool not in run, f"the final stage runs {tool!r}: {run}"
    (user,) = FINAL.all("USER")
    uid, _, gid = user.partition(":")
    values = yaml.safe_load((REPO / "charts" / "lestrade" / "values.yaml").read_text())
    assert int(uid) > 0 and int(uid) == values["podSecurityContext"]["runAsUser"]
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]
    env = " ".join(FINAL.all("ENV"))
    # A read-only root filesystem: no bytecode written at run time (compiled at build), home in /tmp.
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "HOME=/tmp" in env
    assert "UV_COMPILE_BYTECODE=1" in " ".join(BY_NAME["venv"].all("ENV"))
    assert "LITELLM_LOCAL_MODEL_COST_MAP=True" in env  # no download at start
    assert "PATH=/app/.venv/bin:" in env


def test_the_image_runs_every_command_the_chart_gives() -> None:
    """The chart's containers run `python -m <module>`: each module is in the installed project."""
    templates = (REPO / "charts" / "lestrade" / "templates").glob("*.yaml")
    commands = {m for t in templates for m in re.findall(r"command: \[python, -m, ([\w.]+)", t.read_text())}
    assert {"lestrade.operator", "lestrade.api", "lestrade.modelserver"} <= commands, commands
    roots = {"lestrade.operator": REPO / "operator", "lestrade.api": REPO / "api"}
    for module in commands:
        folder = roots.get(module) or REPO / Path(*module.split("."))
        assert (folder / "__main__.py").exists(), module
    (cmd,) = FINAL.all("CMD")
    assert cmd == '["python", "-m", "lestrade.operator"]'


def test_versions_and_build_context_agree() -> None:
    chart = yaml.safe_load((REPO / "charts" / "lestrade" / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]  # the chart's default image tag is this build
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".lestrade"} <= set(ignored)
    copies = BY_NAME["venv"].all("COPY")
    for folder in ("lestrade", "operator", "api"):
        assert folder not in ignored and any(c.startswith(f"{folder} ") for c in copies), folder
