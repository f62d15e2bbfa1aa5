"""The past-findings index (`lestrade.runs.history`) on hand-made resources: what a finding
says, each filter, BM25 ranking, updates and deletions through `sync`, hostile query text."""

from __future__ import annotations

import time
from typing import Any

import pytest

from lestrade.runs.history import FindingsIndex, SearchQuery, finding_of, parse_since


def inv(
    name: str,
    *,
    ns: str = "shop",
    phase: str = "Succeeded",
    title: str = "",
    analysis: str = "",
    subject: dict[str, Any] | None = None,
    sections: dict[str, str] | None = None,
    version: str = "1",
    done: str = "2026-11-20T10:00:00Z",
    calls: list[dict[str, Any]] | None = None,
    decisions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "kind": "Investigation",
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": version,
            "creationTimestamp": "2026-11-20T09:59:00Z",
        },
        "spec": {"title": title or name, "subject": subject or {}, "decisions": decisions or {}},
        "status": {
            "phase": phase,
            "analysis": analysis,
            "sections": sections or {},
            "completionTime": done,
            "toolCalls": calls or [],
        },
    }


def test_a_finding_carries_root_cause_fix_and_involved_resources() -> None:
    obj = inv(
        "oom-1",
        title="web keeps restarting",
        subject={"kind": "Deployment", "name": "web"},
        analysis="whole answer",
        sections={"Conclusions and Possible Root Causes": "web-7f9 is OOMKilled: 64Mi limit", "Next Steps": "raise it"},
        calls=[
            {
                "id": "c1",
                "name": "kubectl_describe",
                "status": "success",
                "params": {"kind": "pod", "name": "web-7f9-abcde", "namespace": "shop"},
            },
            {"id": "c2", "name": "patch_limits", "status": "success", "description": "set memory limit 256Mi"},
        ],
        decisions={"c2": {"approved": True}},
    )
    finding = finding_of(obj)
    assert finding is not None
    assert finding.root_cause == "web-7f9 is OOMKilled: 64Mi limit"
    assert finding.fix == "set memory limit 256Mi (success)"
    assert ("shop", "deployment", "web") in finding.resources and ("shop", "pod", "web-7f9-abcde") in finding.resources
    without_fix = finding_of(inv("oom-2", sections={"Next Steps": "raise the limit"}, analysis="x"))
    assert without_fix is not None and without_fix.fix == "suggested: raise the limit"
    assert finding_of(inv("running", phase="Running")) is None


def test_filters_ranking_and_sync() -> None:
    index = FindingsIndex()
    objects = [
        inv(
            "oom-web",
            title="web OOMKilled",
            analysis="container web exceeded its memory limit",
            subject={"kind": "Pod", "name": "web-5d9c7-x2x4k"},
            done="2026-11-20T10:00:00Z",
        ),
        inv(
            "dns",
            title="resolver failures",
            analysis="coredns cannot reach upstream; memory is fine",
            subject={"kind": "Alert", "name": "CoreDNSErrors"},
            done="2026-11-21T10:00:00Z",
        ),
        inv(
            "oom-db",
            ns="billing",
            title="db OOMKilled",
            analysis="OOMKilled again and again, memory memory",
            subject={"kind": "StatefulSet", "name": "db"},
            done="2026-11-22T10:00:00Z",
        ),
        inv("busy", phase="Running", title="OOMKilled now"),
    ]
    assert index.sync(objects) == 4 and len(index) == 3  # the running one has no finding
    names = lambda rs: [r["name"] for r in rs]  # noqa: E731
    assert names(index.search(SearchQuery(text="OOMKilled memory"))) == ["oom-db", "oom-web", "dns"]
    assert names(index.search(SearchQuery(text="OOMKilled"), namespaces=["shop"])) == ["oom-web"]
    assert index.search(SearchQuery(), namespaces=[]) == []
    assert names(index.search(SearchQuery(name="web"))) == ["oom-web"]  # the pods of Deployment web
    assert names(index.search(SearchQuery(name="we"))) == []
    assert names(index.search(SearchQuery(kind="statefulset", name="db"))) == ["oom-db"]
    assert names(index.search(SearchQuery(alert="corednserrors"))) == ["dns"]
    assert names(index.search(SearchQuery(namespace="billing"))) == ["oom-db"]
    since = parse_since("2026-11-21T00:00:00Z")
    assert names(index.search(SearchQuery(since=since))) == ["oom-db", "dns"]  # newest first
    result = index.search(SearchQuery(name="web"), now=parse_since("2026-11-20T12:00:00Z"))[0]
    assert result["age"] == "2h" and result["finished"] == "2026-11-20T10:00:00Z"

    # A new version is read again, a deleted run leaves, unchanged ones are not read again.
    objects[0] = inv("oom-web", version="2", title="web OOMKilled", analysis="now about quotas")
    assert index.sync(objects[:2] + objects[3:]) == 2
    assert names(index.search(SearchQuery(text="quotas"))) == ["oom-web"]
    assert names(index.search(SearchQuery(text="exceeded"))) == []  # the old text is forgotten
    assert names(index.search(SearchQuery(text="OOMKilled"))) == ["oom-web"]  # the title still says so
    assert "oom-db" not in names(index.search(SearchQuery()))


@pytest.mark.parametrize("hostile", ['" OR *', "NEAR(a b)", "title:x", "a AND", "-x", "*", "'); DROP TABLE runs;--"])
def test_hostile_query_text_is_only_terms(hostile: str) -> None:
    index = FindingsIndex()
    index.sync([inv("a", title="title x near a b"), inv("b", title="drop table runs")])
    index.search(SearchQuery(text=hostile))  # no FTS5 or SQL syntax error
    assert len(index) == 2


def test_since_accepts_durations_and_times_and_names_the_error() -> None:
    now = time.time()
    assert parse_since("24h", now) == now - 86400 and parse_since("7d", now) == now - 7 * 86400
    with pytest.raises(ValueError, match="24h"):
        parse_since("yesterday")


def test_readable_pairs_limit_each_kind_to_its_namespaces() -> None:
    index = FindingsIndex()
    chat = {
        "kind": "Conversation",
        "metadata": {"name": "c", "namespace": "shop", "resourceVersion": "1"},
        "spec": {"turns": [{"ask": "why is web down?"}]},
        "status": {
            "turns": [{"phase": "Answered", "answer": "web is OOMKilled", "completionTime": "2026-11-20T10:00:00Z"}]
        },
    }
    index.sync([inv("i", analysis="web is OOMKilled"), chat])
    assert sorted(index.namespaces()) == [("Conversation", "shop"), ("Investigation", "shop")]
    found = index.search(SearchQuery(text="web"), readable=[("Investigation", "shop")])
    assert [(r["kind"], r["name"]) for r in found] == [("Investigation", "i")]
    assert {r["name"] for r in index.search(SearchQuery(text="web"))} == {"i", "c"}
    assert index.search(SearchQuery(text="web"), readable=[]) == []
