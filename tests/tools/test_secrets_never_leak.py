"""A Secret's value never appears in any tool's output, however the model asks."""

from __future__ import annotations

import base64
import json
import os

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.build import binary_path
from lestrade.operator.tools import default_registry

VALUE = "s3cr3t-VALUE-42xyz"
B64 = base64.b64encode(VALUE.encode()).decode()
INLINE = "inline-env-pass-9876"


def _leaks(text: str) -> list[str]:
    return [v for v in (VALUE, B64, INLINE, B64[:16]) if v in text]


@pytest.fixture
def secret_world(api_client, namespace, make_pod):
    core = k8s.CoreV1Api(api_client)
    manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-creds", "namespace": namespace},
                "type": "Opaque", "data": {"password": B64}, "stringData": {"dsn": f"postgres://app:{VALUE}@db/shop"}}
    core.create_namespaced_secret(namespace, k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name="db-creds", labels={"app": "shop"}, annotations={
            # what `kubectl apply` leaves behind: the whole manifest, values included
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(manifest)}),
        type="Opaque", data={"password": B64}, string_data={"dsn": f"postgres://app:{VALUE}@db/shop"},
    ))
    core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name="app-config"),
        data={"app.properties": f"db.user=app\ndb.password={VALUE}\n"},
    ))
    make_pod(namespace, "shop-api", containers=[k8s.V1Container(
        name="app", image="example.com/shop:1", args=[f"--db-password={VALUE}"],
        env=[k8s.V1EnvVar(name="DB_PASSWORD", value=INLINE),
             k8s.V1EnvVar(name="DB_PASSWORD_REF", value_from=k8s.V1EnvVarSource(
                 secret_key_ref=k8s.V1SecretKeySelector(name="db-creds", key="password")))],
    )])
    return namespace


async def test_no_tool_output_contains_the_secret(api_client, cluster, secret_world) -> None:
    ns = secret_world
    kubectl = binary_path("kubectl")
    registry = default_registry(api_client, bash_env={"KUBECONFIG": str(cluster.kubeconfig),
                                                      "PATH": f"{kubectl.parent}:{os.environ.get('PATH', '')}"})
    tool = registry.get
    calls = [
        ("kubectl_describe", {"kind": "secret", "name": "db-creds", "namespace": ns}),
        ("kubectl_get_by_name", {"kind": "secrets", "name": "db-creds", "namespace": ns}),
        ("kubectl_get_by_kind_in_namespace", {"kind": "secret", "namespace": ns}),
        ("kubectl_get_by_kind_in_cluster", {"kind": "secrets"}),
        ("kubectl_find_resource", {"keyword": "db-creds", "kind": "secret"}),
        ("kubectl_get_yaml", {"kind": "secret", "name": "db-creds", "namespace": ns}),
        ("kubectl_get_yaml", {"kind": "secret", "name": "db-creds"}),
        ("kubectl_describe", {"kind": "pod", "name": "shop-api", "namespace": ns}),
        ("kubectl_get_yaml", {"kind": "pod", "name": "shop-api", "namespace": ns}),
        ("kubectl_describe", {"kind": "configmap", "name": "app-config", "namespace": ns}),
        ("kubectl_get_yaml", {"kind": "cm", "name": "app-config", "namespace": ns}),
        ("kubectl_events", {"namespace": ns}),
        ("bash", {"command": f"kubectl get secret db-creds -n {ns} -o yaml"}),
        ("bash", {"command": f"kubectl get secret db-creds -n {ns} -o jsonpath={{.data.password}}"}),
        ("bash", {"command": f"kubectl get secrets -n {ns} -o json | jq .items"}),
        ("bash", {"command": f"kubectl describe secret db-creds -n {ns}"}),
        ("bash", {"command": f"kubectl get secrets -n {ns}"}),
        ("bash", {"command": f"kubectl get pod shop-api -n {ns} -o yaml"}),
        ("bash", {"command": f"kubectl describe pod shop-api -n {ns}"}),
        ("bash", {"command": f"kubectl get cm app-config -n {ns} -o json"}),
    ]
    outputs = {}
    for name, params in calls:
        out = await tool(name).run(params)
        text = out.text()
        assert not _leaks(text), f"{name} {params} leaked:\n{text}"
        outputs[(name, json.dumps(params))] = out

    described = outputs[("kubectl_describe", json.dumps(calls[0][1]))]
    assert described.status == "success"
    assert f"password  {len(VALUE)} bytes" in described.data
    assert f"dsn  {len(f'postgres://app:{VALUE}@db/shop')} bytes" in described.data
    assert "Opaque" in described.data
    secret_yaml = outputs[("kubectl_get_yaml", json.dumps(calls[5][1]))].data
    assert "password:" in secret_yaml and "bytes, value hidden" in secret_yaml
    assert "last-applied-configuration" not in secret_yaml
    refused = outputs[("bash", json.dumps(calls[12][1]))]
    assert refused.status == "error" and "Secret data" in (refused.error or "")
    real_describe = outputs[("bash", json.dumps(calls[15][1]))]
    assert real_describe.status == "success", real_describe.text()
    assert "password:" in real_describe.data and "bytes" in real_describe.data  # kubectl's own describe
    pod_yaml = outputs[("bash", json.dumps(calls[17][1]))]
    assert pod_yaml.status == "success" and "DB_PASSWORD" in pod_yaml.data
