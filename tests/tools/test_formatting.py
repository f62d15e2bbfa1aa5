"""kubectl-like rendering and compact PromQL output, checked on fixed inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lestrade.operator.tools.common import ToolInputError, cap_text
from lestrade.operator.tools.kubernetes.describe import describe_pod, describe_secret
from lestrade.operator.tools.kubernetes.format import age, events_table, human_duration, render_table, server_table_rows
from lestrade.operator.tools.kubernetes.toolset import format_top_nodes, format_top_pods, parse_since
from lestrade.operator.tools.prometheus import format_matrix, format_vector, parse_time_arg

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _iso(delta: timedelta) -> str:
    return (NOW - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400, "3d"),
        (30 * 86400, "30d"),
    ],
)
def test_human_duration_matches_kubectl(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text
    assert age(_iso(timedelta(seconds=seconds)), NOW) == text


def test_table_aligns_columns_and_bounds_rows() -> None:
    text = render_table(["NAME", "STATUS"], [["a", "Running"], ["long-name", None]], max_rows=5)
    lines = text.splitlines()
    assert lines[0].index("STATUS") == lines[1].index("Running") == lines[2].index("<none>")
    many = render_table(["N"], [[str(i)] for i in range(10)], max_rows=3)
    assert "7 more rows" in many and len(many.splitlines()) == 5


def test_server_table_adds_namespace_and_labels() -> None:
    table = {
        "columnDefinitions": [
            {"name": "Name", "priority": 0},
            {"name": "Ready", "priority": 0},
            {"name": "IP", "priority": 1},
        ],
        "rows": [
            {
                "cells": ["web-1", "0/1", "10.1.0.5"],
                "object": {"metadata": {"namespace": "shop", "labels": {"app": "web", "tier": "fe"}}},
            }
        ],
    }
    headers, rows = server_table_rows(table, with_namespace=True, with_labels=True)
    assert headers == ["NAMESPACE", "NAME", "READY", "IP", "LABELS"]
    assert rows == [["shop", "web-1", "0/1", "10.1.0.5", "app=web,tier=fe"]]
    narrow, _ = server_table_rows(table, wide=False)
    assert narrow == ["NAME", "READY"]


def test_events_sorted_oldest_first_with_counts() -> None:
    events = [
        {
            "type": "Warning",
            "reason": "BackOff",
            "message": "Back-off restarting failed container",
            "count": 5,
            "firstTimestamp": _iso(timedelta(minutes=10)),
            "lastTimestamp": _iso(timedelta(minutes=1)),
            "involvedObject": {"kind": "Pod", "name": "web-1"},
            "source": {"component": "kubelet"},
        },
        {
            "type": "Normal",
            "reason": "Scheduled",
            "message": "Successfully assigned",
            "eventTime": _iso(timedelta(minutes=20)),
            "involvedObject": {"kind": "Pod", "name": "web-1"},
            "reportingComponent": "default-scheduler",
        },
    ]
    text = events_table(events)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["LAST", "SEEN", "TYPE"]
    assert "Scheduled" in lines[1] and "BackOff" in lines[2]
    assert "(x5 over" in lines[2] and "pod/web-1" in lines[2] and "kubelet" in lines[2]


def test_describe_pod_shows_oomkilled_last_state() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "nodeName": "kwok-node-0",
            "containers": [
                {
                    "name": "app",
                    "image": "shop/web:1.2",
                    "resources": {"limits": {"memory": "64Mi"}},
                    "env": [
                        {"name": "DB_PASSWORD", "value": "inline-pass"},
                        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "key"}}},
                    ],
                }
            ],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": False,
                    "restartCount": 7,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        },
    }
    text = describe_pod(pod, [])
    for fragment in (
        "Name:",
        "web-1",
        "Node:",
        "kwok-node-0",
        "State:",
        "Waiting",
        "CrashLoopBackOff",
        "Last State:",
        "Terminated",
        "OOMKilled",
        "Exit Code:",
        "137",
        "Restart Count:",
        "7",
        "memory:",
        "64Mi",
        "Ready",
        "False",
        "Events:",
        "<none>",
        "<set to the key 'key' in secret 'api'>",
    ):
        assert fragment in text, fragment
    assert "inline-pass" not in text


def test_describe_secret_shows_sizes_not_values() -> None:
    secret = {
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "db",
            "namespace": "shop",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": '{"data":{"password":"aHVudGVyMg=="}}'},
        },
        "data": {"password": "aHVudGVyMg=="},
    }
    text = describe_secret(secret, None)
    assert "password  7 bytes" in text
    assert "aHVudGVyMg==" not in text and "hunter2" not in text


def test_top_formatting() -> None:
    pods = [
        {
            "metadata": {"name": "web-1", "namespace": "shop"},
            "containers": [
                {"usage": {"cpu": "250000000n", "memory": "65536Ki"}},
                {"usage": {"cpu": "5m", "memory": "1Mi"}},
            ],
        }
    ]
    text = format_top_pods(pods, with_namespace=True)
    assert text.splitlines()[1].split() == ["shop", "web-1", "255m", "65Mi"]
    nodes = [{"metadata": {"name": "n1"}, "usage": {"cpu": "2", "memory": "8Gi"}}]
    text = format_top_nodes(nodes, {"n1": {"cpu": "16", "memory": "64Gi"}})
    assert text.splitlines()[1].split() == ["n1", "2000m", "12%", "8192Mi", "12%"]


def test_durations() -> None:
    assert parse_since("90") == 90
    assert parse_since("1h30m") == 5400
    assert parse_since(None) is None
    with pytest.raises(ToolInputError):
        parse_since("yesterday")
    assert parse_time_arg("-1h", 0, now=10_000) == 6400
    assert parse_time_arg("2026-01-01T12:00:00Z", 0) == NOW.timestamp()
    assert parse_time_arg(None, 42) == 42


def test_prometheus_formatting_is_compact() -> None:
    vector = [{"metric": {"__name__": "up", "job": "api"}, "value": [1767268800, "1"]}]
    assert format_vector(vector).splitlines()[1] == 'up{job="api"} 1'
    values = [[1767268800 + 15 * i, str(i)] for i in range(240)]
    text = format_matrix([{"metric": {"pod": "web-1"}, "values": values}])
    assert "240 points" in text and "min=0 max=239 last=239" in text
    assert len(text.splitlines()[-1].split()) == 30  # downsampled


def test_cap_text_keeps_the_requested_end() -> None:
    text = "\n".join(f"line {i}" for i in range(10_000))
    head = cap_text(text, 1000)
    assert head.startswith("line 0") and "truncated" in head and len(head) < 1100
    tail = cap_text(text, 1000, keep="tail")
    assert tail.rstrip().endswith("line 9999") and "truncated" in tail


def _ev(reason: str, minutes: float, etype: str = "Normal", message: str = "") -> dict:
    when = (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": etype,
        "reason": reason,
        "message": message or reason,
        "lastTimestamp": when,
        "involvedObject": {"kind": "Pod", "name": "p"},
        "source": {"component": "kubelet"},
    }


def test_a_long_event_message_keeps_its_cause_at_the_end() -> None:
    """Issue #27: image pull errors put the cause ("manifest unknown", "no such host") after
    300 characters of context; the message column keeps both ends."""
    message = (
        'Failed to pull image "r.example.com/a:v1": '
        + "rpc error: failed to resolve reference; " * 30
        + "not found: manifest unknown"
    )
    text = events_table([_ev("Failed", 1, "Warning", message)])
    assert "manifest unknown" in text and "Failed to pull image" in text and " ... " in text
    assert len(text.splitlines()[1]) < 1200
    other = render_table(["A", "B"], [["x" * 300, "y" * 300]])  # other tables keep their 200-character cells
    assert len(other.splitlines()[1]) == 200 + 3 + 200


def test_over_the_limit_routine_events_make_way_for_warnings() -> None:
    """Issue #27: the one FailedMount among 300 events of a noisy pod stays in view."""
    noise = [_ev("Pulled", 1 - i / 1000) for i in range(299)]
    key = _ev("FailedMount", 6, "Warning", 'MountVolume.SetUp failed for volume "tls" : secret "x" not found')
    text = events_table([*noise, key])
    assert "FailedMount" in text and text.startswith("[200 older events not shown: all Normal]")
    assert len(text.splitlines()) == 1 + 1 + 100
    warnings = [_ev("BackOff", 10 - i / 100, "Warning") for i in range(150)]
    mixed = events_table([*noise[:10], *warnings])
    assert mixed.startswith("[60 older events not shown: 10 Normal, 50 Warning]")
