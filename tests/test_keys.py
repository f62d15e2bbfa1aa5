"""Every `lestrade.dev/*` key is spelled once, in `lestrade.resources.keys` (group/version names
in `lestrade.resources.constants`)."""

from __future__ import annotations

import ast
from pathlib import Path

from lestrade.resources import keys

REPO = Path(__file__).resolve().parents[1]
HOMES = {"lestrade/resources/keys.py", "lestrade/resources/constants.py"}
NOT_KEYS = {
    "lestrade.dev/delivery/v1",  # the webhook payload's version (operator/delivery/payload.py)
    "lestrade.dev/",  # an Event's reportingComponent, `lestrade.dev/<component>` (recorder.py)
}


def spelled_keys(source: str) -> list[tuple[int, str]]:
    """String literals (but documentation: a string on its own line) that spell a `lestrade.dev/` key."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and "lestrade.dev/" in node.value
        and "lestrade.dev/v1alpha1" not in node.value
        and node.value not in NOT_KEYS
    ]


def test_every_key_is_spelled_in_one_module() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for folder in ("operator", "api", "lestrade")
        for path in sorted((REPO / folder).rglob("*.py"))
        if str(path.relative_to(REPO)) not in HOMES
        for line, value in spelled_keys(path.read_text())
    ]
    assert not found, "name these in lestrade/resources/keys.py and import them:\n" + "\n".join(found)


def test_the_keys_are_distinct_and_the_check_can_fail() -> None:
    values = {name: value for name, value in vars(keys).items() if name.isupper() and name != "PREFIX"}
    assert all(v.startswith(keys.PREFIX) for v in values.values())
    # one spelling, one name (but the finalizer and the Job pod's annotation share theirs by history)
    assert len(set(values.values())) == len(values) - 1, values
    assert spelled_keys('"""lestrade.dev/docs are fine"""\nX = "lestrade.dev/owner"\n') == [(2, "lestrade.dev/owner")]
