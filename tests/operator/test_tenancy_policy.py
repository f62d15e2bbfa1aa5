"""The scope decision and what a scope turns off, as pure logic; the chart ships the generated
requester policies."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from lestrade.operator.admission import requester as requester_policy
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.context import ScopedTools
from lestrade.operator.tenancy.scopes import decide_scope, parse_policy
from lestrade.resources.tenancy import Requester, RunScope

pytestmark = pytest.mark.binaries("helm")

CHART = Path(__file__).resolve().parents[2] / "charts" / "lestrade"

POLICY = """
grants:
  - groups: [sre]
    namespaces: ["*"]
  - fromNamespaces: [team-a]
    namespaces: [team-a-db, shared]
  - groups: [auditors]
    fromNamespaces: [audit]
    namespaces: [finance]
"""


def test_by_default_a_run_reads_its_own_namespace_only() -> None:
    scope = decide_scope("team-b", Requester(username="bob", groups=["devs"]), parse_policy(POLICY))
    assert scope == RunScope(cluster=False, namespaces=["team-b"], reason="own namespace team-b")


@pytest.mark.parametrize(
    ("namespace", "groups", "expected"),
    [
        ("team-b", ["sre"], None),  # a group grant: the whole cluster
        ("team-a", ["devs"], ["shared", "team-a", "team-a-db"]),  # a namespace grant
        ("audit", ["auditors"], ["audit", "finance"]),  # both conditions hold
        ("audit", ["devs"], ["audit"]),  # only one holds: no grant
        ("team-b", ["auditors"], ["team-b"]),
    ],
)
def test_grants_add_namespaces(namespace: str, groups: list[str], expected: list[str] | None) -> None:
    scope = decide_scope(namespace, Requester(username="x", groups=groups), parse_policy(POLICY))
    if expected is None:
        assert scope.cluster and scope.namespaces == []
    else:
        assert not scope.cluster and scope.namespaces == expected


def test_without_a_recorded_requester_group_grants_do_not_apply() -> None:
    scope = decide_scope("team-b", None, parse_policy(POLICY))
    assert scope.namespaces == ["team-b"] and "no requester recorded" in scope.reason


@pytest.mark.parametrize("text", ["grants: {a: 1}", "grants: [{groups: [sre]}]", "grants: [{namespaces: [1]}]", ": :"])
def test_a_broken_policy_grants_nothing_and_says_why(text: str) -> None:
    policy = parse_policy(text)
    assert policy.grants == () and policy.error and "grants.yaml" in policy.error
    scope = decide_scope("team-b", Requester(username="x", groups=["sre"]), policy)
    assert scope.namespaces == ["team-b"] and policy.error in scope.reason


def _registry(scope: RunScope) -> tuple[list[str], str]:
    settings = OperatorSettings.from_env(
        {},
        tools={
            "prometheus_url": "http://prometheus:9090",
            "write_tools": True,
            "alertmanager_url": "http://alertmanager:9093",
        },
    )
    with k8s.ApiClient() as client:
        registry = ScopedTools(settings).registry(client, scope, None)
        # what the model is told: the system prompt's part and, for a deferred toolset such as
        # prometheus, the instructions `open_toolset` answers with
        opened = [ts.instructions for ts in registry.deferred()]
        return [t.name for t in registry.enabled_tools()], "\n".join([registry.instructions(), *opened])


def test_prometheus_and_alerts_reach_scoped_runs_confined_to_their_namespaces() -> None:
    cluster_wide, cluster_text = _registry(RunScope(cluster=True))
    scoped, scoped_text = _registry(RunScope(namespaces=["team-a", "team-a-db"]))
    for name in ("prometheus_instant_query", "prometheus_alerts", "alertmanager_silences"):
        assert name in cluster_wide and name in scoped, (cluster_wide, scoped)
    assert "kubectl_describe" in scoped
    # the model is told which series it can see (the enforcement itself: test_promql_scope_enforced.py)
    assert "`namespace` label is one of: team-a, team-a-db" in scoped_text
    assert "label is one of" not in cluster_text


def test_write_tools_refuse_namespaces_outside_the_scope() -> None:
    settings = OperatorSettings.from_env({}, tools={"write_tools": True})
    with k8s.ApiClient() as client:
        registry = ScopedTools(settings).registry(client, RunScope(namespaces=["team-a"]), None)
        tool = registry.get("kubectl_delete_pod")
        assert tool is not None
        output = asyncio.run(tool.run({"namespace": "team-b", "name": "web-1"}))
    assert output.status == "error" and "outside this run's scope" in str(output.error or output.data)


def test_requester_template_is_the_generated_policy() -> None:
    text = (CHART / "templates" / "requester-policy.yaml").read_text()
    assert text == requester_policy.chart_template(), (
        "regenerate: python -m lestrade.operator.admission.requester > charts/lestrade/templates/requester-policy.yaml"
    )
    validating, mutating = text.split("{{- if .Values.tenancy.mutatingPolicy }}")
    assert [
        d for d in yaml.safe_load_all("\n".join(validating.splitlines()[1:])) if d
    ] == requester_policy.validating_manifests()
    assert [
        d for d in yaml.safe_load_all("\n".join(mutating.splitlines()[:-2])) if d
    ] == requester_policy.mutating_manifests()


def test_the_chart_renders_the_grants_the_operator_reads(tmp_path: Path) -> None:
    import json
    import subprocess

    from lestrade.localcluster.build import ensure_binaries

    helm = ensure_binaries(["helm"], quiet=True)["helm"]
    grants = [{"groups": ["sre"], "namespaces": ["*"]}, {"fromNamespaces": ["team-a"], "namespaces": ["team-a-db"]}]
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"tenancy": {"grants": grants}}))
    result = subprocess.run(
        [str(helm), "template", "r", str(CHART), "--namespace", "ops", "-f", str(values)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (policy,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "r-lestrade-scope-policy"]
    parsed = parse_policy(policy["data"]["grants.yaml"])
    assert parsed.error is None and len(parsed.grants) == 2
    assert decide_scope("team-a", None, parsed).namespaces == ["team-a", "team-a-db"]
    assert decide_scope("x", Requester(username="u", groups=["sre"]), parsed).cluster
    operator = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert env["LESTRADE_SCOPES_NAMESPACE"] == "r-lestrade-scopes"
    assert env["LESTRADE_SCOPE_POLICY"] == "ops/r-lestrade-scope-policy"
    assert env["LESTRADE_TOOLS_READ_ROLE"] == "r-lestrade-tools-read"
    # the transcript admission policy lets only holders of this (pseudo-resource) grant write chunks
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "r-lestrade-operator")
    assert {"apiGroups": ["lestrade.dev"], "resources": ["transcripts"], "verbs": ["create", "update", "delete"]} in (
        role["rules"]
    )


@pytest.mark.parametrize(
    "requester", [None, Requester(username="x", groups=[]), Requester(username="x", groups=["sre"])]
)
@pytest.mark.parametrize("namespace", ["team-b", "finance", "default"])
def test_a_grant_with_neither_groups_nor_from_namespaces_matches_nothing(
    namespace: str, requester: Requester | None
) -> None:
    """Issue 29: such a grant, if it matched, would give every run the namespace."""
    policy = parse_policy("grants:\n  - namespaces: [finance, '*']\n")
    assert not policy.error and len(policy.grants) == 1
    scope = decide_scope(namespace, requester, policy)
    assert not scope.cluster and scope.namespaces == [namespace]


def test_the_policy_watches_the_stamps_the_context_store_writes() -> None:
    from lestrade.api.contexts.store import UPDATED_ANNOTATION, WRITE_ANNOTATION

    assert requester_policy.CONTEXT_UPDATED_ANNOTATION == UPDATED_ANNOTATION
    assert requester_policy.CONTEXT_WRITE_ANNOTATION == WRITE_ANNOTATION
