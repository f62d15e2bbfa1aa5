"""The layer rules of docs/ARCHITECTURE.md, checked by import-linter (contracts in pyproject.toml).

    lestrade.api → lestrade.resources ← lestrade.operator → lestrade.operator.agent → lestrade.operator.tools

and, inside each, the packages' layers (the contracts in pyproject.toml say which).

`lestrade.operator` and `lestrade.api` live in the folders operator/ and api/ (setup.py maps
them), and import-linter finds modules by walking the top-level package's folder, so through the
editable install it would see neither. The test therefore lays the installed packages out as a
wheel would (a `lestrade/` tree of symlinks, found where the import system finds each package)
and runs `lint-imports` there.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
# The packages setup.py maps to folders of their own (its ROOTS), parents first.
PACKAGES = ("lestrade", "lestrade.operator", "lestrade.api")


def _package_view(root: Path) -> Path:
    """`root/lestrade/...`: real folders, symlinked .py files, one subtree per mapped package."""
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        source = Path(next(iter(spec.submodule_search_locations)))
        target = root.joinpath(*package.split("."))
        for folder, dirs, files in os.walk(source):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            here = target / Path(folder).relative_to(source)
            here.mkdir(parents=True, exist_ok=True)
            for name in files:
                if name.endswith(".py") and not (here / name).exists():
                    (here / name).symlink_to(Path(folder) / name)
    return root


def _lint_imports(view: Path) -> subprocess.CompletedProcess[str]:
    # lint-imports puts its working directory first on sys.path: the view, not the repo.
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=view,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_are_kept(tmp_path: Path) -> None:
    result = _lint_imports(_package_view(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_forbidden_import_is_caught(tmp_path: Path) -> None:
    """The check sees inside operator/ and api/ and their packages: an API module importing the
    operator, a tool importing the agent engine, the operator's base importing a run, and what
    every endpoint shares importing HolmesGPT's chat core each break their contracts."""
    view = _package_view(tmp_path)
    lestrade = view / "lestrade"
    (lestrade / "api" / "base" / "layer_probe.py").write_text("from lestrade.operator.runs import attempt\n")
    (lestrade / "api" / "base" / "chat_probe.py").write_text("from lestrade.api.holmes import chats\n")
    (lestrade / "operator" / "tools" / "bash" / "layer_probe.py").write_text(
        "from lestrade.operator.agent import loop\n"
    )
    (lestrade / "operator" / "base" / "layer_probe.py").write_text("from lestrade.operator.runs import supervisor\n")
    result = _lint_imports(view)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "lestrade.api.base.layer_probe -> lestrade.operator.runs.attempt" in result.stdout
    assert "lestrade.api.base.chat_probe -> lestrade.api.holmes.chats" in result.stdout
    assert "lestrade.operator.tools.bash.layer_probe -> lestrade.operator.agent.loop" in result.stdout
    assert "lestrade.operator.base.layer_probe -> lestrade.operator.runs.supervisor" in result.stdout
    assert "3 broken" in result.stdout
