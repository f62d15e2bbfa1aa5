"""Write the CRD manifests generated from the models: `python -m lestrade.resources.generate`.

The YAML files are committed (the Helm chart and `kubectl apply -f crds/` need them without
Python), so they can drift from the models. `--check` compares instead of writing and exits
non-zero listing the stale files; the test suite runs the same comparison.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from lestrade.resources.crd import DEFINITIONS, crd_manifest

__all__ = ["OUTPUT_DIRS", "HEADER", "render", "expected_files", "stale_files", "write", "main"]

# Relative to the repository root; both get identical files.
OUTPUT_DIRS: tuple[str, ...] = ("crds", "charts/lestrade/crds")
HEADER = (
    "# Generated from lestrade/resources by `python -m lestrade.resources.generate`.\n"
    "# Do not edit: change the pydantic models and regenerate.\n"
)
REPO_ROOT = Path(__file__).resolve().parents[2]


def render(manifest: dict) -> str:
    """One manifest as the YAML text written to disk (stable across runs)."""
    body = yaml.safe_dump(manifest, sort_keys=False, width=100, allow_unicode=True)
    return HEADER + "---\n" + body


def expected_files(root: Path = REPO_ROOT) -> dict[Path, str]:
    """Every generated path and the text it must contain."""
    files: dict[Path, str] = {}
    for definition in DEFINITIONS:
        text = render(crd_manifest(definition))
        for folder in OUTPUT_DIRS:
            files[root / folder / definition.file_name] = text
    return files


def stale_files(root: Path = REPO_ROOT) -> list[Path]:
    """Generated paths that are missing or differ from what the models produce."""
    return [
        path
        for path, text in expected_files(root).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def write(root: Path = REPO_ROOT) -> list[Path]:
    """Write every stale file; returns the paths written."""
    written = []
    expected = expected_files(root)
    for path in stale_files(root):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected[path], encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lestrade.resources.generate",
        description="Generate the Lestrade CRD manifests from the pydantic models.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 listing the files that are missing or out of date",
    )
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root (default: %(default)s)")
    args = parser.parse_args(argv)
    root: Path = args.root
    if args.check:
        stale = stale_files(root)
        for path in stale:
            print(f"stale: {path.relative_to(root)}", file=sys.stderr)
        if stale:
            print("run: python -m lestrade.resources.generate", file=sys.stderr)
            return 1
        return 0
    for path in write(root):
        print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
