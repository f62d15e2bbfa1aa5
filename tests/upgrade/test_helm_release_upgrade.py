"""The real `helm install` then `helm upgrade` against the apiserver: the next chart version
(a copy of this chart with its version bumped) with changed settings upgrades in place, with
no immutable field changed (a Deployment selector change would make `helm upgrade` fail on
every cluster), and `helm rollback` goes back. The pods themselves run in
test_helm_upgrade.py; here KWOK only pretends to run them.

Cluster-wide singletons are off for this release (the admission policy and the Kopf peering
CRDs have fixed names that the session's other releases own).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from lestrade.localcluster import binary_path, ensure_binaries
from lestrade.testing.local_release import CHART

pytestmark = pytest.mark.binaries("helm")


def helm(cluster: Any, *args: str) -> str:
    ensure_binaries(["helm"], quiet=True)
    proc = subprocess.run(
        [str(binary_path("helm")), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def next_version(tmp_path: Path) -> Path:
    chart = tmp_path / "lestrade"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    major, minor, patch = meta["version"].split(".")
    meta["version"] = f"{major}.{minor}.{int(patch) + 1}"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return chart


def test_helm_upgrade_and_rollback_on_the_apiserver(
    cluster: Any, api_client: k8s.ApiClient, crds: None, namespace: str, tmp_path: Path
) -> None:
    release = f"hu-{uuid.uuid4().hex[:5]}"
    singletons_off = ["--set", "admissionPolicy.enabled=false", "--set", "peering.enabled=false"]
    helm(cluster, "install", release, str(CHART), "-n", namespace, *singletons_off)
    apps = k8s.AppsV1Api(api_client)
    name = f"{release}-lestrade"
    before = apps.read_namespaced_deployment(name, namespace)
    try:
        helm(
            cluster,
            "upgrade",
            release,
            str(next_version(tmp_path)),
            "-n",
            namespace,
            *singletons_off,
            "--set",
            "operator.concurrency=4",
            "--set",
            "modelList.fast.model=openai/gpt-4.1",
        )
        after = apps.read_namespaced_deployment(name, namespace)
        assert after.spec.selector.match_labels == before.spec.selector.match_labels
        assert after.metadata.labels["helm.sh/chart"].endswith(".1")  # the next version's
        containers = {c.name: c for c in after.spec.template.spec.containers}
        env = {e.name: e.value for e in containers["operator"].env}
        assert env["LESTRADE_MAX_CONCURRENT_RUNS"] == "4"
        assert "demo-model" not in containers  # a model list now: the demo sidecar goes
        history = json.loads(helm(cluster, "history", release, "-n", namespace, "-o", "json"))
        assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")]

        helm(cluster, "rollback", release, "1", "-n", namespace)
        back = apps.read_namespaced_deployment(name, namespace)
        assert "demo-model" in {c.name for c in back.spec.template.spec.containers}
        assert {e.name: e.value for e in back.spec.template.spec.containers[0].env}[
            "LESTRADE_MAX_CONCURRENT_RUNS"
        ] == "10"
    finally:
        helm(cluster, "uninstall", release, "-n", namespace, "--wait=false")
