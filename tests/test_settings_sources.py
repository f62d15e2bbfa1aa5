"""Settings come from one place per process: `OperatorSettings.from_env` and `ApiSettings.from_env`.

Nothing else in the operator or the API reads the environment, so what a process is configured
with is what those two objects say (and a test configures a process by building them, never by
changing its own environment). One module may still read it, for a reason of its own: the bash
tool hands an allowlisted part of the process's environment to the commands it starts, and keeps
the files the process was pointed at away from them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
READERS = {
    "operator/base/settings.py": "the operator's settings",
    "api/settings.py": "the API's settings",
    "operator/tools/bash/tool.py": "the environment of the tool's child processes",
}


def environment_reads(source: str) -> list[int]:
    """Lines that read the process environment: `os.environ`, `os.getenv`, `environ` from os."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "getenvb"):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ("environ", "getenv") for alias in node.names):
                lines.append(node.lineno)
    return lines


def test_only_the_settings_read_the_environment() -> None:
    found = {
        f"{path.relative_to(REPO)}:{line}"
        for folder in ("operator", "api")
        for path in (REPO / folder).rglob("*.py")
        if str(path.relative_to(REPO)) not in READERS
        for line in environment_reads(path.read_text())
    }
    assert not found, f"read the environment through OperatorSettings / ApiSettings instead: {sorted(found)}"


def test_every_way_of_reading_it_is_seen() -> None:
    probe = "import os\nfrom os import environ, getenv\nx = os.environ.get('A')\ny = os.getenv('B')\n"
    assert sorted(environment_reads(probe)) == [2, 3, 4]
    assert environment_reads("import os\npath = os.path.join('a', 'b')\n") == []
    for allowed in READERS:
        assert environment_reads((REPO / allowed).read_text()), f"{allowed} no longer reads it: drop it from READERS"
