"""`tools.extraReadRules`: the tools' read-only role grows by values to read the add-ons'
custom resources (the documented example, rendered as written), refuses anything but plain
reads of named resources, and the Kubernetes tools read such a resource by any of its names.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from lestrade.kube import make_api_client
from lestrade.localcluster import binary_path
from lestrade.localcluster.processes import wait_until
from lestrade.operator.tools import kubernetes_toolset
from lestrade.testing.local_release import CHART, render_chart

pytestmark = pytest.mark.binaries("helm")


def _documented_example() -> list[dict]:
    """The commented `extraReadRules:` block of values.yaml, uncommented: the docs must work."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "# extraReadRules:")
    block = []
    for line in lines[start:]:
        if not line.strip().startswith("#"):
            break
        block.append(line.strip()[2:])
    return yaml.safe_load("\n".join(block))["extraReadRules"]


def _tools_role(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-tools-read"))


def test_the_documented_example_extends_the_read_role_with_reads_only() -> None:
    example = _documented_example()
    groups = {g for rule in example for g in rule["apiGroups"]}
    assert {
        "argoproj.io",
        "kustomize.toolkit.fluxcd.io",
        "helm.toolkit.fluxcd.io",
        "cert-manager.io",
        "keda.sh",
    } <= groups
    plain = _tools_role(render_chart("lestrade", "lestrade-system"))
    role = _tools_role(render_chart("lestrade", "lestrade-system", {"tools": {"extraReadRules": example}}))
    added = role["rules"][len(plain["rules"]) :]
    assert role["rules"][: len(plain["rules"])] == plain["rules"]
    assert [{"apiGroups": r["apiGroups"], "resources": r["resources"]} for r in added] == example
    assert all(r["verbs"] == ["get", "list", "watch"] for r in added)


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ({"apiGroups": [""], "resources": ["secrets"]}, "apiGroups"),
        ({"apiGroups": ["argoproj.io"], "resources": ["secrets"]}, "resources"),
        ({"apiGroups": ["argoproj.io"], "resources": ["*"]}, "resources"),
        ({"apiGroups": ["*"], "resources": ["applications"]}, "apiGroups"),
        ({"apiGroups": ["argoproj.io"], "resources": ["applications/status"]}, "resources"),
        ({"apiGroups": ["argoproj.io"], "resources": ["applications"], "verbs": ["delete"]}, "verbs"),
    ],
)
def test_the_schema_refuses_more_than_plain_reads(rule: dict, why: str) -> None:
    with pytest.raises(RuntimeError, match=why):
        render_chart("lestrade", "lestrade-system", {"tools": {"extraReadRules": [rule]}})


APPLICATION_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "applications.argoproj.io"},
    "spec": {
        "group": "argoproj.io",
        "scope": "Namespaced",
        "names": {
            "plural": "applications",
            "singular": "application",
            "kind": "Application",
            "shortNames": ["app", "apps"],
        },
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                "additionalPrinterColumns": [
                    {"name": "Sync", "type": "string", "jsonPath": ".status.sync.status"},
                    {"name": "Health", "type": "string", "jsonPath": ".status.health.status"},
                ],
            }
        ],
    },
}


def _may_list(api_client, namespace: str, account: str) -> bool:
    review = k8s.AuthorizationV1Api(api_client).create_subject_access_review(
        k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{namespace}:{account}",
                groups=["system:serviceaccounts"],
                resource_attributes=k8s.V1ResourceAttributes(
                    verb="list", group="argoproj.io", resource="applications", namespace=namespace
                ),
            )
        )
    )
    return bool(review.status.allowed)


def _kubectl(cluster, *args: str, stdin: str | None = None) -> None:
    proc = subprocess.run(
        [str(binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


async def test_the_tools_read_a_custom_resource_once_the_values_grant_it(
    cluster, api_client, namespace, tmp_path: Path
) -> None:
    _kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(APPLICATION_CRD))
    _kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "crd/applications.argoproj.io")
    k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "argoproj.io",
        "v1alpha1",
        namespace,
        "applications",
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "shop"},
            "spec": {"source": {"repoURL": "https://git.example/shop", "path": "deploy"}},
            "status": {"sync": {"status": "OutOfSync"}, "health": {"status": "Degraded"}},
        },
    )

    release = f"r{uuid.uuid4().hex[:6]}"
    values = {"tools": {"extraReadRules": _documented_example()}}
    docs = [
        d
        for d in render_chart(release, namespace, values)
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount")
    ]
    manifest = yaml.safe_dump_all(docs)
    _kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=manifest)
    try:
        account = next(
            d["metadata"]["name"]
            for d in docs
            if d["kind"] == "ServiceAccount" and d["metadata"]["name"].endswith("-tools")
        )
        # the authorizer reads roles from an informer: wait until it has the new rules
        wait_until("the tools role to read Applications", lambda: _may_list(api_client, namespace, account), 60)
        with make_api_client(str(cluster.kubeconfig_for(namespace, account, tmp_path / "kubeconfig"))) as client:
            tools = {t.name: t for t in kubernetes_toolset(client).tools}

            async def listed(kind: str) -> str:
                out = await tools["kubectl_get_by_kind_in_namespace"].run({"kind": kind, "namespace": namespace})
                return out.text()

            for kind in ("applications", "application", "Application", "app", "applications.argoproj.io"):
                text = await listed(kind)
                assert "shop" in text and "OutOfSync" in text and "Degraded" in text, (kind, text)
            described = await tools["kubectl_describe"].run(
                {"kind": "application", "name": "shop", "namespace": namespace}
            )
            assert "git.example/shop" in described.text(), described.text()
    finally:
        _kubectl(cluster, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=manifest)

    # without the values, the same account cannot read them (the grant is what opened it)
    plain = [
        d
        for d in render_chart(release, namespace)
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount")
    ]
    _kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(plain))
    try:
        wait_until("the rules to be gone", lambda: not _may_list(api_client, namespace, account), 60)
        with make_api_client(str(cluster.kubeconfig_for(namespace, account, tmp_path / "kubeconfig2"))) as client:
            tools = {t.name: t for t in kubernetes_toolset(client).tools}
            out = await tools["kubectl_get_by_kind_in_namespace"].run({"kind": "applications", "namespace": namespace})
            assert out.status == "error" and "forbidden" in out.text().lower(), out.text()
    finally:
        _kubectl(cluster, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=yaml.safe_dump_all(plain))
        _kubectl(cluster, "delete", "--ignore-not-found", "--wait=false", "crd/applications.argoproj.io")
