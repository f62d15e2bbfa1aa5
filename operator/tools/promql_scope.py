"""Confine PromQL to a run's namespaces, as prom-label-proxy does: on the parsed query, never text.

Prometheus has no authorization of its own, so a run scoped to some namespaces may only query
series whose `namespace` label is one of them. The query is parsed with a real PromQL parser
(`promql-parser`, the Rust parser of GreptimeDB), and a matcher `namespace=~"a|b"` (or `="a"`)
is added to *every* vector selector, wherever it sits: inside functions, aggregations, both
sides of `or`/`unless`/`and`, subqueries, `label_replace`, `absent`. Matchers of one selector
are ANDed, so the added matcher only ever narrows what the query reads: a tenant's own
`namespace=~".+"`, `__name__` tricks or regexes cannot widen it, and relabelling the *result*
(label_replace) cannot change which series were read.

Why each selector is re-built from its parsed parts: the parser's `str()` of a selector does not
escape quotes in values, so a selector is written out here (values quoted by `json.dumps`, a
subset of PromQL's Go string syntax), parsed again, and compared with what was meant. The
whole rewritten query is then parsed once more and every selector checked; anything that
does not hold is refused with a message rather than sent. `verify_server_ast` lets the caller
re-check the rewritten query with the server's own parser (`/api/v1/parse_query`), so a
difference between this parser and Prometheus' cannot open a hole either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import promql_parser as pp

__all__ = ["NamespaceScope", "ScopeRefused", "enforce_query", "enforce_selector", "verify_server_ast"]

# Functions whose evaluation reads series the query does not select (`info` joins
# `target_info` by job/instance, from any namespace): no selector matcher can confine them.
_REFUSED_FUNCTIONS = frozenset({"info"})
MAX_QUERY_CHARS = 4000
MAX_NODES = 60
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a name that needs no quotes (not query parsing)
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_OPS = ((pp.MatchOp.Equal, "="), (pp.MatchOp.NotEqual, "!="), (pp.MatchOp.Re, "=~"), (pp.MatchOp.NotRe, "!~"))


class ScopeRefused(ValueError):
    """The query cannot be confined to the run's namespaces; the message says why."""


@dataclass(frozen=True)
class NamespaceScope:
    """The namespaces a run may read and the label that names a series' namespace."""

    namespaces: tuple[str, ...]
    label: str = "namespace"

    def __post_init__(self) -> None:
        if not self.namespaces:
            raise ValueError("a namespace scope needs at least one namespace")
        for name in self.namespaces:  # DNS labels: no regex metacharacter can hide in them
            if not _NAMESPACE.fullmatch(name):
                raise ValueError(f"{name!r} is not a namespace name")

    def matcher(self) -> tuple[str, str, str]:
        """(label, op, value) of the matcher added to every selector."""
        if len(self.namespaces) == 1:
            return (self.label, "=", self.namespaces[0])
        # Prometheus anchors regular expressions, and DNS labels hold no metacharacter.
        return (self.label, "=~", "|".join(sorted(self.namespaces)))

    def allows(self, labels: dict[str, Any] | None) -> bool:
        """Whether an alert, rule or series with these labels belongs to the scope."""
        return str((labels or {}).get(self.label, "")) in self.namespaces

    def describe(self) -> str:
        return f"{self.label} in ({', '.join(self.namespaces)})"


def _quote(value: str) -> str:
    # JSON escapes `"`, `\` and control characters as \" \\ \n \uXXXX: all valid PromQL escapes.
    return json.dumps(value, ensure_ascii=False)


def _name(label: str) -> str:
    return label if _LABEL_NAME.fullmatch(label) else _quote(label)  # UTF-8 names (Prometheus 3)


def _op(matcher: Any) -> str:
    for known, text in _OPS:  # the parser's enums compare by value, they have no names
        if matcher.op == known:
            return text
    raise ScopeRefused(f"unknown matcher operator {matcher.op}")


def _duration(delta: timedelta) -> str:
    if delta < timedelta(0):
        return "-" + pp.display_duration(-delta)
    return pp.display_duration(delta)


def _selector_parts(selector: Any) -> list[tuple[str, str, str]]:
    if selector.matchers.or_matchers:
        raise ScopeRefused(
            "selectors with `or` between matchers cannot be confined; write one selector per alternative"
        )
    parts = [(m.name, _op(m), m.value) for m in selector.matchers.matchers]
    if selector.name:
        parts.insert(0, ("__name__", "=", selector.name))
    return parts


def _write_selector(parts: list[tuple[str, str, str]], selector: Any) -> str:
    text = "{" + ",".join(f"{_name(n)}{op}{_quote(v)}" for n, op, v in parts) + "}"
    if selector.offset is not None:
        text += f" offset {_duration(selector.offset)}"
    at = selector.at
    if at is not None:
        if at.type == pp.AtModifierType.Start:
            text += " @ start()"
        elif at.type == pp.AtModifierType.End:
            text += " @ end()"
        else:
            text += f" @ {at.at.timestamp():.3f}"
    return text


def _at_key(selector: Any) -> tuple[str, float | None] | None:
    at = selector.at
    return None if at is None else (str(at.type), at.at and round(at.at.timestamp(), 3))


def _confined(selector: Any, scope: NamespaceScope) -> Any:
    """`selector` with the scope's matcher added, re-parsed and checked."""
    wanted = _selector_parts(selector) + [scope.matcher()]
    text = _write_selector(wanted, selector)
    try:
        rebuilt = pp.parse(text)
    except ValueError as exc:
        raise ScopeRefused(f"cannot confine the selector {selector.prettify()}: {exc}") from None
    if not isinstance(rebuilt, pp.VectorSelector):
        raise ScopeRefused(f"cannot confine the selector {selector.prettify()}")
    got = sorted(_selector_parts(rebuilt))
    if got != sorted(wanted) or rebuilt.offset != selector.offset or _at_key(rebuilt) != _at_key(selector):
        raise ScopeRefused(f"cannot confine the selector {selector.prettify()} (it did not survive rewriting)")
    return rebuilt


def _parse(query: str) -> Any:
    try:
        return pp.parse(query)
    except ValueError as exc:
        raise ScopeRefused(f"cannot parse the query: {exc}") from None


def _nodes(expr: Any) -> list[Any]:
    found: list[Any] = []
    pp.walk(expr, lambda node: found.append(node) or True)  # type: ignore[func-returns-value]
    return found


def _check(expr: Any, scope: NamespaceScope) -> int:
    """Raise unless every selector of `expr` carries the scope's matcher; the selector count."""
    want = scope.matcher()
    count = 0
    for node in _nodes(expr):
        if isinstance(node, pp.Call) and node.func.name in _REFUSED_FUNCTIONS:
            raise ScopeRefused(
                f"{node.func.name}() reads series outside the query's selectors and is not "
                f"available to runs scoped to namespaces"
            )
        if isinstance(node, pp.VectorSelector):
            count += 1
            if want not in _selector_parts(node):
                raise ScopeRefused(f"the selector {node.prettify()} could not be confined to {scope.describe()}")
    return count


def _children(node: Any) -> list[Any]:
    if isinstance(node, (pp.AggregateExpr,)):
        return [node.expr] + ([node.param] if isinstance(node.param, pp.Expr) else [])
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, (pp.UnaryExpr, pp.ParenExpr, pp.SubqueryExpr)):
        return [node.expr]
    if isinstance(node, pp.Call):
        return [a for a in node.args if isinstance(a, pp.Expr)]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    return []


def _bounded(expr: Any) -> None:
    """Refuse a query of more than MAX_NODES parts before the parser's own tree walks, which
    grow much faster than the tree (a hostile 200-part query would take seconds of CPU)."""
    stack, seen = [expr], 0
    while stack:
        seen += 1
        if seen > MAX_NODES:
            raise ScopeRefused(
                f"the query has more than {MAX_NODES} parts, too many to confine; split it into smaller queries"
            )
        stack.extend(_children(stack.pop()))


def enforce_query(query: str, scope: NamespaceScope) -> str:
    """`query` with every selector confined to the scope, or `ScopeRefused` saying why."""
    if not query or not query.strip():
        raise ScopeRefused("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ScopeRefused(f"the query is longer than {MAX_QUERY_CHARS} characters; split it")
    original = _parse(query)
    _bounded(original)
    selectors = 0

    def post(node: Any) -> Any:
        nonlocal selectors
        if isinstance(node, pp.Call) and node.func.name in _REFUSED_FUNCTIONS:
            raise ScopeRefused(
                f"{node.func.name}() reads series outside the query's selectors and is not "
                f"available to runs scoped to namespaces"
            )
        if isinstance(node, pp.VectorSelector):
            selectors += 1
            return _confined(node, scope)
        return None

    rewritten = pp.transform(original, None, post).prettify()
    # What is sent is the text: parse it again and check it, not the tree we built.
    if _check(_parse(rewritten), scope) != selectors:
        raise ScopeRefused("the query changed shape while being confined; it was not sent")
    return rewritten


def enforce_selector(selector: str, scope: NamespaceScope) -> str:
    """A series selector (`match[]` of the series and label APIs) confined to the scope."""
    expr = _parse(selector)
    if not isinstance(expr, pp.VectorSelector):
        raise ScopeRefused(f"'{selector}' is not a series selector (like up{{job=\"api\"}})")
    return enforce_query(selector, scope)


def _walk_json(node: Any) -> Iterable[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk_json(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_json(value)


def verify_server_ast(ast: Any, scope: NamespaceScope) -> None:
    """Check the server's own parse of a rewritten query (`/api/v1/parse_query`'s JSON): every
    selector (vector or range) carries the scope's matcher. Raises `ScopeRefused` otherwise."""
    label, op, value = scope.matcher()
    for node in _walk_json(ast):
        if node.get("type") == "call" and (node.get("func") or {}).get("name") in _REFUSED_FUNCTIONS:
            raise ScopeRefused("the server read a refused function in the rewritten query; it was not sent")
        # Prometheus writes a range selector as one `matrixSelector` node with its own matchers
        if node.get("type") not in ("vectorSelector", "matrixSelector") and "matchers" not in node:
            continue
        matchers = node.get("matchers") or []
        if not any(m.get("name") == label and m.get("type") == op and m.get("value") == value for m in matchers):
            raise ScopeRefused(
                "the server parsed the rewritten query differently (a selector without the "
                "namespace matcher); it was not sent"
            )
