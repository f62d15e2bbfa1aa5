"""A run scoped to namespaces cannot read another namespace's series, alerts, rules or silences.

Real servers only: a real Prometheus (built from Go modules) scrapes a target that serves one
secret per tenant namespace and a series without a namespace, evaluates alerting and recording
rules, and sends the alerts to a real Alertmanager (also built from Go modules). The tools of a
run scoped to `tenant-a` then try every selector trick; each answer must hold tenant-a's data
only, and must not differ between tenant-b (which exists) and a namespace that does not exist,
so not even the existence of another tenant's series leaks.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from lestrade.localcluster.alertmanager import AlertmanagerServer, ensure_alertmanager
from lestrade.localcluster.processes import wait_until
from lestrade.localcluster.prometheus import PrometheusServer, ensure_prometheus
from lestrade.operator.tools.alerting import alerting_toolset
from lestrade.operator.tools.prometheus import prometheus_toolset
from lestrade.operator.tools.promql_scope import NamespaceScope

# tenant-b's values are primes no sum of tenant-a's can make, so a leak shows in any aggregate
SERIES = (
    'lestrade_tenant_secret{namespace="tenant-a",pod="a-1"} 2\n'
    'lestrade_tenant_secret{namespace="tenant-b",pod="b-1"} 1009\n'
    'lestrade_tenant_secret{namespace="tenant-b",pod="b-2"} 7919\n'
    'lestrade_tenant_secret{namespace="tenant-c",pod="c-1"} 30\n'
    'lestrade_node_load{node="node-1"} 104729\n'
)
RULES = """\
groups:
  - name: tenants
    rules:
      - alert: TenantSecretHigh
        expr: lestrade_tenant_secret > 0
        labels: {severity: warning}
        annotations: {summary: "{{ $labels.pod }} holds {{ $value }}"}
      - alert: NodeLoadHigh
        expr: lestrade_node_load > 1
      - record: tenant:value:sum
        expr: sum by (namespace) (lestrade_tenant_secret)
"""
# The Alertmanager is built from Go modules on first use (minutes on a fresh 2-core machine),
# inside the first test's setup: give the module's tests room for it.
pytestmark = [pytest.mark.timeout(1800), pytest.mark.binaries("prometheus", "alertmanager")]

# whole words only: random ports (instance="127.0.0.1:41009") and silence ids ("…3fab-1c…")
# hold these digits and letters without being a leak
LEAKS = [
    re.compile(rf"\b{re.escape(word)}\b")
    for word in ("tenant-b", "b-1", "b-2", "1009", "7919", "node-1", "104729", "NodeLoadHigh")
]


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 — http.server's naming
            body = SERIES.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def alertmanager() -> Iterator[str]:
    with AlertmanagerServer(binary=ensure_alertmanager()) as server:
        yield server.url


@pytest.fixture(scope="module")
def prometheus(target: str, alertmanager: str) -> Iterator[str]:
    with PrometheusServer(
        [target], binary=ensure_prometheus(), rules=RULES, alertmanager=alertmanager.removeprefix("http://")
    ) as server:

        def ready() -> bool:
            series = httpx.get(f"{server.url}/api/v1/query", params={"query": "count(lestrade_tenant_secret)"}).json()
            alerts = httpx.get(f"{alertmanager}/api/v2/alerts").json()
            return (
                bool(series["data"]["result"]) and series["data"]["result"][0]["value"][1] == "4" and len(alerts) == 5
            )  # 4 tenant secrets + the node alert reached Alertmanager

        wait_until("Prometheus to scrape the tenants and Alertmanager to hold their alerts", ready, timeout=120)
        yield server.url


def _tools(prometheus: str, alertmanager: str, *namespaces: str) -> dict[str, Any]:
    scope = NamespaceScope(namespaces) if namespaces else None
    tools = (
        prometheus_toolset(prometheus, scope=scope).tools
        + alerting_toolset(prometheus, alertmanager, scope=scope).tools
    )
    return {t.name: t for t in tools}


@pytest.fixture(scope="module")
def tenant_a(prometheus: str, alertmanager: str) -> dict[str, Any]:
    return _tools(prometheus, alertmanager, "tenant-a")


@pytest.fixture(scope="module")
def admin(prometheus: str, alertmanager: str) -> dict[str, Any]:
    return _tools(prometheus, alertmanager)


async def _text(tools: dict[str, Any], name: str, **params: Any) -> str:
    out = await tools[name].run(params)
    assert out.status != "error", out.text()
    return out.data


def _clean(text: str) -> None:
    leaked = [word.pattern for word in LEAKS if word.search(text)]
    assert not leaked, f"leaked {leaked}:\n{text}"


async def test_the_admin_sees_every_tenant(admin) -> None:
    """The data the tenant must not see is there (else the tests below would prove nothing)."""
    everything = await _text(admin, "prometheus_instant_query", query='{__name__=~"lestrade_.+"}')
    for word in ("tenant-b", "1009", "7919", "104729", "tenant-a"):
        assert word in everything, everything


ATTACKS = [
    "lestrade_tenant_secret",
    'lestrade_tenant_secret{namespace="tenant-b"}',
    'lestrade_tenant_secret{namespace=~".+"}',
    'lestrade_tenant_secret{namespace=~"tenant-a|tenant-b"}',
    'lestrade_tenant_secret{namespace!="tenant-a"}',
    '{__name__=~".+"}',
    '{__name__=~"lestrade_.*", namespace=""}',
    '{namespace="tenant-b"}',
    "lestrade_tenant_secret or lestrade_node_load",
    'lestrade_tenant_secret unless lestrade_tenant_secret{namespace="tenant-b"}',
    'vector(1) and on() lestrade_tenant_secret{namespace="tenant-b"}',
    'lestrade_tenant_secret{namespace="tenant-b"} or on() vector(0)',
    "sum(lestrade_tenant_secret)",
    "sum by (namespace, pod) (lestrade_tenant_secret)",
    'count by (namespace) ({namespace!=""})',
    'max_over_time(lestrade_tenant_secret{namespace="tenant-b"}[5m:1s])',
    "max_over_time((sum(lestrade_tenant_secret) + sum(lestrade_node_load))[1m:1s])",
    'label_replace(lestrade_tenant_secret{namespace="tenant-b"}, "namespace", "tenant-a", "namespace", ".*")',
    'label_replace({__name__="lestrade_node_load"}, "namespace", "tenant-a", "", "")',
    'absent(lestrade_tenant_secret{namespace="tenant-b"})',
    "scalar(sum(lestrade_node_load))",
    'lestrade_tenant_secret offset 1m or lestrade_tenant_secret{namespace="tenant-b"} @ end()',
    'topk(10, {__name__=~".+"} * on() group_left() lestrade_node_load)',
    # a value that would close the selector if it were written back without escaping
    'lestrade_tenant_secret{pod="x\\"} or {__name__=~\\".+\\"} #"}',
]


@pytest.mark.parametrize("query", ATTACKS)
async def test_no_selector_trick_reads_another_namespace(tenant_a, query: str) -> None:
    out = await tenant_a["prometheus_instant_query"].run({"query": query})
    assert out.status in ("success", "no_data"), out.text()
    _clean(out.data)
    # tenant-b (exists) and tenant-zzz (does not) give the same answer: no existence oracle
    other = await tenant_a["prometheus_instant_query"].run({"query": query.replace("tenant-b", "tenant-zzz")})
    strip = lambda text: "\n".join(line for line in text.splitlines() if " series at " not in line)  # noqa: E731
    assert strip(other.data) == strip(out.data)


async def test_the_tenant_reads_its_own_series(tenant_a) -> None:
    own = await _text(tenant_a, "prometheus_instant_query", query="sum(lestrade_tenant_secret)")
    assert own.splitlines()[1] == "{} 2", own  # tenant-a's 2, never 2+1009+7919+30
    names = await _text(tenant_a, "prometheus_instant_query", query='count by (namespace) ({__name__=~".+"})')
    assert 'namespace="tenant-a"' in names and "tenant-c" not in names
    ranged = await _text(tenant_a, "prometheus_range_query", query='{__name__=~"lestrade_.+"}', start="-2m", step="5s")
    assert 'pod="a-1"' in ranged
    _clean(ranged)


async def test_a_scope_of_several_namespaces_reads_all_of_them_and_no_more(prometheus, alertmanager) -> None:
    tools = _tools(prometheus, alertmanager, "tenant-a", "tenant-c")
    total = await _text(tools, "prometheus_instant_query", query="sum(lestrade_tenant_secret)")
    assert total.splitlines()[1] == "{} 32", total  # 2 + 30


async def test_series_and_label_apis_are_confined(tenant_a) -> None:
    series = await _text(tenant_a, "prometheus_series", match='{__name__=~".+"}')
    assert 'pod="a-1"' in series
    _clean(series)
    for label in ("namespace", "pod", "__name__", "node"):
        values = await tenant_a["prometheus_labels"].run({"label": label})
        _clean(values.data)
    namespaces = await _text(tenant_a, "prometheus_labels", label="namespace", match='{namespace="tenant-b"}')
    _clean(namespaces)
    names = await _text(tenant_a, "prometheus_labels", label="__name__")
    assert "lestrade_tenant_secret" in names and "lestrade_node_load" not in names
    assert "node" not in (await _text(tenant_a, "prometheus_labels")).splitlines()[1:]


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("info(lestrade_tenant_secret)", "info()"),
        ('lestrade_tenant_secret{pod="a-1" or pod="b-1"}', "or"),
        ("sum(", "cannot parse"),
        ("", "missing required parameter"),
    ],
)
async def test_a_query_that_cannot_be_confined_is_refused_with_a_message(tenant_a, query: str, why: str) -> None:
    out = await tenant_a["prometheus_instant_query"].run({"query": query})
    assert out.status == "error" and why in (out.error or ""), out.text()


async def test_a_series_call_needs_a_selector(tenant_a) -> None:
    out = await tenant_a["prometheus_series"].run({"match": "sum(lestrade_tenant_secret)"})
    assert out.status == "error" and "not a series selector" in (out.error or ""), out.text()


def test_prometheus_parses_the_rewritten_query_itself(prometheus) -> None:
    """The second check (the server's own parser) is on against this Prometheus."""
    body = httpx.post(f"{prometheus}/api/v1/parse_query", data={"query": 'up{namespace="a"}'}).json()
    assert body["status"] == "success" and body["data"]["type"] == "vectorSelector", body


async def test_alerts_rules_and_silences_are_confined(tenant_a, admin, alertmanager) -> None:
    silences = [
        {
            "matchers": [{"name": "namespace", "value": "tenant-a", "isRegex": False, "isEqual": True}],
            "comment": "a: deploy",
        },
        {
            "matchers": [{"name": "namespace", "value": "tenant-b", "isRegex": False, "isEqual": True}],
            "comment": "b: secret work",
        },
        {
            "matchers": [{"name": "namespace", "value": "tenant-.*", "isRegex": True, "isEqual": True}],
            "comment": "all: tenant-b too",
        },
    ]
    for silence in silences:
        response = httpx.post(
            f"{alertmanager}/api/v2/silences",
            json={**silence, "createdBy": "test", "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z"},
        )
        assert response.status_code == 200, response.text

    alerts = await _text(tenant_a, "prometheus_alerts")
    assert "TenantSecretHigh" in alerts and 'pod="a-1"' in alerts and "a-1 holds 2" in alerts
    _clean(alerts)
    assert "tenant-b" in await _text(admin, "prometheus_alerts")

    rules = await _text(tenant_a, "prometheus_rules")
    assert rules.startswith("1 rules") and "TenantSecretHigh" in rules, rules
    _clean(rules)
    assert "tenant:value:sum" not in rules  # a rule of no namespace is the admin's
    everything = await _text(admin, "prometheus_rules")
    assert everything.startswith("3 rules") and "NodeLoadHigh" in everything and "tenant:value:sum" in everything

    routed = await _text(tenant_a, "alertmanager_alerts", include_silenced=True)
    assert 'pod="a-1"' in routed
    _clean(routed)
    by_filter = await tenant_a["alertmanager_alerts"].run(
        {"filter": ['namespace="tenant-b"'], "include_silenced": True}
    )
    _clean(by_filter.data)
    assert 'pod="b-1"' in await _text(admin, "alertmanager_alerts", include_silenced=True)

    muted = await _text(tenant_a, "alertmanager_silences")
    assert muted.startswith("1 silences") and "a: deploy" in muted, muted
    assert "secret work" not in muted and "all: tenant-b too" not in muted
    assert (await _text(admin, "alertmanager_silences")).startswith("3 silences")
