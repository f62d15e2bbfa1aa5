"""PromQL tools against a real Prometheus that scraped known series."""

from __future__ import annotations

import pytest

from lestrade.operator.tools import prometheus_toolset

pytestmark = pytest.mark.binaries("prometheus")


@pytest.fixture(scope="module")
def prom(prometheus):
    return {t.name: t for t in prometheus_toolset(prometheus).tools}


async def test_instant_query_returns_loaded_series(prom) -> None:
    out = await prom["prometheus_instant_query"].run({"query": "lestrade_test_memory_bytes"})
    assert out.status == "success", out.text()
    lines = out.data.splitlines()
    assert lines[0].startswith("2 series at ")
    assert "lestrade_test_memory_bytes{instance=" in out.data
    assert any('pod="web-1"' in line and line.endswith(" 52428800") for line in lines)
    assert any('pod="web-2"' in line and line.endswith(" 67108864") for line in lines)

    total = await prom["prometheus_instant_query"].run({"query": "sum(lestrade_test_memory_bytes)"})
    assert total.data.splitlines()[1] == "{} 119537664"
    scalar = await prom["prometheus_instant_query"].run(
        {"query": "scalar(sum(lestrade_test_memory_bytes)) / 1024 / 1024"}
    )
    assert scalar.data == "scalar: 114"


async def test_range_query_summarises_points(prom) -> None:
    out = await prom["prometheus_range_query"].run(
        {"query": 'lestrade_test_requests_total{code="500"}', "start": "-5m", "step": "1s"}
    )
    assert out.status == "success", out.text()
    header = out.data.splitlines()[1]
    points = int(header.split()[0])
    assert points >= 4
    assert "min=" in header and "max=" in header and "last=" in header
    minimum = int(header.split("min=")[1].split()[0])
    maximum = int(header.split("max=")[1].split()[0])
    assert maximum > minimum  # the counter grew between scrapes


async def test_series_and_labels(prom) -> None:
    series = await prom["prometheus_series"].run({"match": "lestrade_test_requests_total"})
    assert series.status == "success", series.text()
    assert series.data.splitlines()[0] == "2 series:"
    assert 'code="500"' in series.data and 'code="200"' in series.data

    names = await prom["prometheus_labels"].run({})
    assert {"code", "path", "pod", "job", "instance"} <= set(names.data.splitlines()[1:])
    metrics = await prom["prometheus_labels"].run({"label": "__name__"})
    assert "lestrade_test_memory_bytes" in metrics.data.splitlines()
    pods = await prom["prometheus_labels"].run({"label": "pod", "match": "lestrade_test_memory_bytes"})
    assert pods.data.splitlines()[1:] == ["web-1", "web-2"]


async def test_bad_promql_is_a_clear_error(prom) -> None:
    out = await prom["prometheus_instant_query"].run({"query": "sum(("})
    assert out.status == "error" and "bad_data" in (out.error or "")


async def test_unreachable_prometheus_is_reported() -> None:
    tool = prometheus_toolset("http://127.0.0.1:9").tools[0]
    out = await tool.run({"query": "up"})
    assert out.status == "error" and "cannot reach Prometheus" in (out.error or "")
