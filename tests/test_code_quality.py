"""The formatter, the linter and the type checker, run by `make test` like the import contracts.

ruff (configured in pyproject.toml: pyflakes, pycodestyle's errors, import order, bugbear,
pyupgrade, async pitfalls; the formatter at 120 columns) over the whole tree, and mypy over the
installed packages laid out as a wheel would (the same view `test_layers.py` gives import-linter,
since `lestrade.operator` and `lestrade.api` live in folders of other names).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_layers import _package_view

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    result = _run(str(BIN / "ruff"), "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tree_is_formatted() -> None:
    result = _run(str(BIN / "ruff"), "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, "run `.venv/bin/ruff format .`\n" + result.stdout + result.stderr


def test_mypy_finds_nothing(tmp_path: Path) -> None:
    view = _package_view(tmp_path)
    result = _run(
        str(BIN / "mypy"),
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / ".mypy"),
        "-p",
        "lestrade",
        cwd=view,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A type error and an unused import are caught (so a green run means something)."""
    view = _package_view(tmp_path)
    (view / "lestrade" / "context" / "quality_probe.py").write_text(
        "import os\n\n\ndef half(n: int) -> int:\n    return n / 2\n"
    )
    typed = _run(
        str(BIN / "mypy"),
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / ".mypy"),
        "-p",
        "lestrade.context",
        cwd=view,
    )
    assert typed.returncode == 1 and "quality_probe.py:5" in typed.stdout, typed.stdout
    linted = _run(
        str(BIN / "ruff"),
        "check",
        "--no-cache",
        "--isolated",
        "--select",
        "F401",
        str(view / "lestrade" / "context" / "quality_probe.py"),
    )
    assert linted.returncode == 1 and "F401" in linted.stdout, linted.stdout
