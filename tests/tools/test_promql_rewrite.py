"""The PromQL rewriting of scoped runs, as pure logic (the real-server proof is test_promql_scope_enforced.py)."""

from __future__ import annotations

import promql_parser as pp
import pytest

from lestrade.operator.tools.promql_scope import (
    NamespaceScope,
    ScopeRefused,
    enforce_query,
    enforce_selector,
    verify_server_ast,
)

ONE = NamespaceScope(("shop",))
TWO = NamespaceScope(("web", "shop"))


def _selectors(query: str) -> list[list[tuple[str, str, str]]]:
    found: list[pp.VectorSelector] = []
    pp.walk(pp.parse(query), lambda n: found.append(n) if isinstance(n, pp.VectorSelector) else None)
    ops = [(pp.MatchOp.Equal, "="), (pp.MatchOp.NotEqual, "!="), (pp.MatchOp.Re, "=~"), (pp.MatchOp.NotRe, "!~")]
    out = []
    for s in found:
        matchers = [(m.name, next(v for k, v in ops if m.op == k), m.value) for m in s.matchers.matchers]
        out.append(matchers + ([("__name__", "=", s.name)] if s.name else []))
    return out


@pytest.mark.parametrize(
    "query",
    [
        "up",
        'sum by (pod) (rate(http_requests_total{code=~"5.."}[5m]))',
        "a or b unless c and d",
        "max_over_time(rate(x[1m])[10m:30s] offset 1h)",
        'label_replace(up, "namespace", "other", "", "")',
        'absent(up{namespace="other"})',
        '{__name__=~".+", namespace!="shop"}',
        "histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m]))) > on() group_left() scalar(y)",
        "-x @ start() offset -5m",
    ],
)
def test_every_selector_gets_the_matcher_and_nothing_else_changes(query: str) -> None:
    for scope, matcher in ((ONE, ("namespace", "=", "shop")), (TWO, ("namespace", "=~", "shop|web"))):
        rewritten = enforce_query(query, scope)
        before, after = _selectors(query), _selectors(rewritten)
        assert len(before) == len(after) > 0
        for old, new in zip(before, after):
            assert sorted(new) == sorted(old + [matcher]), (query, rewritten)


def test_values_are_escaped_so_a_quote_cannot_close_the_selector() -> None:
    query = 'up{job="x\\"} or {__name__=~\\".+\\"} #"}'
    rewritten = enforce_query(query, ONE)
    (selector,) = _selectors(rewritten)  # still one selector, the value intact
    assert sorted(selector) == [
        ("__name__", "=", "up"),
        ("job", "=", 'x"} or {__name__=~".+"} #'),
        ("namespace", "=", "shop"),
    ]
    for value in ["a\\nb", "tab\\there", "back\\\\slash", "uni\\u00e9", "single'quote"]:
        out = enforce_query(f'up{{job="{value}"}}', ONE)
        assert [m for m in _selectors(out)[0] if m[0] == "job"] == [
            m for m in _selectors(f'up{{job="{value}"}}')[0] if m[0] == "job"
        ]


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("info(up)", "info()"),
        ('up{a="1" or b="2"}', "or"),
        ("sum(", "cannot parse"),
        ("   ", "empty"),
        (" or ".join(f"m{i}" for i in range(40)), "more than 60 parts"),  # the parser's walks are superlinear
        ("up" + " " * 4000, "longer than 4000"),
    ],
)
def test_what_cannot_be_confined_is_refused(query: str, why: str) -> None:
    with pytest.raises(ScopeRefused, match=why.replace("(", r"\(").replace(")", r"\)")):
        enforce_query(query, ONE)


def test_series_apis_take_selectors_only() -> None:
    assert _selectors(enforce_selector('up{job="a"}', TWO))[0]
    with pytest.raises(ScopeRefused, match="not a series selector"):
        enforce_selector("sum(up)", ONE)


def test_scope_names_are_namespaces_so_no_regex_can_hide_in_them() -> None:
    with pytest.raises(ValueError):
        NamespaceScope((".*",))
    with pytest.raises(ValueError):
        NamespaceScope(())
    assert TWO.allows({"namespace": "web"}) and not TWO.allows({"namespace": "webx"}) and not TWO.allows({})


def test_the_servers_own_parse_is_checked() -> None:
    good = {
        "type": "binaryExpr",
        "lhs": {
            "type": "vectorSelector",
            "matchers": [
                {"type": "=", "name": "namespace", "value": "shop"},
                {"type": "=", "name": "__name__", "value": "up"},
            ],
        },
        "rhs": {"type": "numberLiteral", "val": "1"},
    }
    verify_server_ast(good, ONE)
    bad = {
        "type": "binaryExpr",
        "lhs": good["lhs"],
        "rhs": {"type": "vectorSelector", "matchers": [{"type": "=~", "name": "__name__", "value": ".+"}]},
    }
    with pytest.raises(ScopeRefused, match="differently"):
        verify_server_ast(bad, ONE)
    with pytest.raises(ScopeRefused):
        verify_server_ast({"type": "call", "func": {"name": "info"}, "args": []}, ONE)
    # Prometheus flattens a range selector into one node with its own matchers
    unscoped_range = {
        "type": "call",
        "func": {"name": "rate"},
        "args": [
            {
                "type": "matrixSelector",
                "name": "x",
                "range": 300000,
                "matchers": [{"type": "=", "name": "__name__", "value": "x"}],
            }
        ],
    }
    with pytest.raises(ScopeRefused, match="differently"):
        verify_server_ast(unscoped_range, ONE)
