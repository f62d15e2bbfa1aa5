"""The Helm chart renders, and what it renders is accepted by the real apiserver (dry run)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lestrade.localcluster.build import ensure_binaries
from lestrade.operator.admission import decisions as admission

pytestmark = pytest.mark.binaries("helm")

CHART = Path(__file__).resolve().parents[2] / "charts" / "lestrade"


def helm_template(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    helm = ensure_binaries(["helm"], quiet=True)["helm"]
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    result = subprocess.run(
        [str(helm), "template", "lestrade", str(CHART), "--namespace", "lestrade-system", "-f", str(values_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HELM_CACHE_HOME": str(tmp_path / "cache"), "HELM_CONFIG_HOME": str(tmp_path / "config")},
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_admission_template_is_the_generated_policy() -> None:
    text = (CHART / "templates" / "admission-policy.yaml").read_text().splitlines()
    assert text[0].startswith("{{- if") and text[-1] == "{{- end }}"
    body = [doc for doc in yaml.safe_load_all("\n".join(text[1:-1])) if doc]
    assert body == admission.policy_manifests(), "regenerate: python -m lestrade.operator.admission.decisions"


@pytest.mark.parametrize(
    "values",
    [
        {},
        {
            "modelList": {"fast": {"model": "openai/gpt-4.1", "api_key": "{{ env.OPENAI_API_KEY }}"}},
            "replicas": 2,
            "operator": {"jobMode": True, "concurrency": 50},
        },
        {
            "operator": {"watchNamespaces": ["team-a"]},
            "peering": {"enabled": True, "installCRDs": False},
            "api": {"enabled": False},
        },
        {"tools": {"enableWriteTools": True, "prometheusUrl": "http://prometheus.monitoring:9090"}},
    ],
    ids=["defaults", "models-jobs-replicas", "namespaced", "write-tools"],
)
def test_chart_renders_and_the_apiserver_accepts_it(
    values: dict[str, Any], tmp_path: Path, cluster: Any, crds: None
) -> None:
    docs = helm_template(tmp_path, values)
    (deployment,) = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    operator = containers["operator"]
    assert operator["command"] == ["python", "-m", "lestrade.operator"]
    assert any(a.startswith("--liveness=") for a in operator["args"])
    assert operator["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert env["LESTRADE_MAX_CONCURRENT_RUNS"] == str((values.get("operator") or {}).get("concurrency", 10))
    assert ("api" in containers) == (values.get("api", {}).get("enabled", True))

    # Tools may read the cluster but never Secrets; the operator role covers what it writes.
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "ClusterRole")}
    tools = roles["lestrade-tools-read"]
    assert all("secrets" not in rule["resources"] for rule in tools["rules"])
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"} for rule in tools["rules"])
    operator_rules = roles["lestrade-operator"]["rules"]
    assert any("investigations/status" in r["resources"] for r in operator_rules)

    tools_values = values.get("tools") or {}
    assert ("lestrade-tools-write" in roles) == bool(tools_values.get("enableWriteTools"))
    assert env["LESTRADE_ENABLE_WRITE_TOOLS"] == str(bool(tools_values.get("enableWriteTools"))).lower()
    assert env.get("LESTRADE_PROMETHEUS_URL") == tools_values.get("prometheusUrl")
    if values.get("modelList"):
        (secret,) = by_kind(docs, "Secret")
        assert yaml.safe_load(secret["stringData"]["modelList.yaml"]) == values["modelList"]
        assert env["LESTRADE_MODEL_LIST"] == "/etc/lestrade/models/modelList.yaml"
    if (values.get("operator") or {}).get("jobMode"):
        assert env["LESTRADE_JOB_MODE"] == "true" and env["LESTRADE_JOB_IMAGE"] == operator["image"]
        (template,) = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("job-template")]
        job_pod = yaml.safe_load(template["data"]["pod.yaml"])["spec"]
        assert job_pod["serviceAccountName"] == pod["serviceAccountName"]
    if (values.get("operator") or {}).get("watchNamespaces"):
        assert "--namespace=team-a" in operator["args"]
        assert [p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")] == ["team-a"]
    assert by_kind(docs, "ValidatingAdmissionPolicy")

    # The apiserver validates every object (schemas, CEL of the admission policy) without
    # storing it; the CRDs the chart brings are applied for real first, so objects of their
    # kinds can be checked too.
    kubectl = ensure_binaries(["kubernetes"], quiet=True)["kubectl"]
    env_k = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl), *args], input=stdin, env=env_k, capture_output=True, text=True, timeout=120, check=False
        )

    # (Kopf's peering CRDs as the default values install them, also when these values skip them.)
    (tmp_path / "base").mkdir()
    crds = by_kind(helm_template(tmp_path / "base", {}), "CustomResourceDefinition")
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
        for n in ["lestrade-system", *((values.get("operator") or {}).get("watchNamespaces") or [])]
    ]
    namespaces += by_kind(docs, "Namespace")  # the chart's own (tenancy's scopes namespace) exist first
    applied = run("apply", "-f", "-", stdin=yaml.safe_dump_all([*namespaces, *crds]))
    assert applied.returncode == 0, applied.stderr
    for crd in crds:
        waited = run("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")
        assert waited.returncode == 0, waited.stderr
    dry = run("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert dry.returncode == 0, dry.stderr
