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
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db-creds", "namespace": namespace},
        "type": "Opaque",
        "data": {"password": B64},
        "stringData": {"dsn": f"postgres://app:{VALUE}@db/shop"},
    }
    core.create_namespaced_secret(
        namespace,
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(
                name="db-creds",
                labels={"app": "shop"},
                annotations={
                    # what `kubectl apply` leaves behind: the whole manifest, values included
                    "kubectl.kubernetes.io/last-applied-configuration": json.dumps(manifest)
                },
            ),
            type="Opaque",
            data={"password": B64},
            string_data={"dsn": f"postgres://app:{VALUE}@db/shop"},
        ),
    )
    core.create_namespaced_config_map(
        namespace,
        k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(name="app-config"),
            data={"app.properties": f"db.user=app\ndb.password={VALUE}\n"},
        ),
    )
    make_pod(
        namespace,
        "shop-api",
        containers=[
            k8s.V1Container(
                name="app",
                image="example.com/shop:1",
                args=[f"--db-password={VALUE}"],
                env=[
                    k8s.V1EnvVar(name="DB_PASSWORD", value=INLINE),
                    k8s.V1EnvVar(
                        name="DB_PASSWORD_REF",
                        value_from=k8s.V1EnvVarSource(
                            secret_key_ref=k8s.V1SecretKeySelector(name="db-creds", key="password")
                        ),
                    ),
                ],
            )
        ],
    )
    return namespace


def _rot13(text: str, lower_only: bool = False) -> str:
    """`tr a-z n-za-m` (lower_only) or `tr a-zA-Z n-za-mN-ZA-M`."""
    table = str.maketrans("abcdefghijklmnopqrstuvwxyz", "nopqrstuvwxyzabcdefghijklm")
    if not lower_only:
        table.update(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "NOPQRSTUVWXYZABCDEFGHIJKLM"))
    return text.translate(table)


def _leaks_transformed(text: str) -> list[str]:
    """The values as they are, reversed (`rev`) or rotated (`tr a-z n-za-m`, issue 29: the
    detector must see what the transforms of the calls below would make of them)."""
    return [
        v
        for v in (VALUE, B64, INLINE, B64[:16])
        if any(form in text for form in (v, v[::-1], _rot13(v), _rot13(v, lower_only=True)))
    ]


def test_the_detector_sees_every_transform_the_calls_use() -> None:
    assert _leaks_transformed(f"x {_rot13(VALUE, lower_only=True)} y") == [VALUE]
    assert _leaks_transformed(f"x {_rot13(INLINE)} y") == [INLINE]
    assert _leaks_transformed(f"x {VALUE[::-1]} y") == [VALUE]


async def test_no_tool_output_contains_the_secret(api_client, cluster, secret_world) -> None:
    ns = secret_world
    kubectl = binary_path("kubectl")
    registry = default_registry(
        api_client,
        bash_env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": f"{kubectl.parent}:{os.environ.get('PATH', '')}"},
    )
    tool = registry.get
    # (tool, params, expected): "ok" must succeed, "refused" must be refused before running
    calls = [
        ("kubectl_describe", {"kind": "secret", "name": "db-creds", "namespace": ns}, "ok"),
        ("kubectl_get_by_name", {"kind": "secrets", "name": "db-creds", "namespace": ns}, "ok"),
        ("kubectl_get_by_kind_in_namespace", {"kind": "secret", "namespace": ns}, "ok"),
        ("kubectl_get_by_kind_in_cluster", {"kind": "secrets"}, "ok"),
        ("kubectl_find_resource", {"keyword": "db-creds", "kind": "secret"}, "ok"),
        ("kubectl_get_yaml", {"kind": "secret", "name": "db-creds", "namespace": ns}, "ok"),
        ("kubectl_get_yaml", {"kind": "secret", "name": "db-creds"}, "ok"),
        ("kubectl_describe", {"kind": "pod", "name": "shop-api", "namespace": ns}, "ok"),
        ("kubectl_get_yaml", {"kind": "pod", "name": "shop-api", "namespace": ns}, "ok"),
        ("kubectl_describe", {"kind": "configmap", "name": "app-config", "namespace": ns}, "ok"),
        ("kubectl_get_yaml", {"kind": "cm", "name": "app-config", "namespace": ns}, "ok"),
        ("kubectl_events", {"namespace": ns}, "ok"),
        ("bash", {"command": f"kubectl describe secret db-creds -n {ns}"}, "ok"),
        ("bash", {"command": f"kubectl get secrets -n {ns}"}, "ok"),
        ("bash", {"command": f"kubectl get secrets -n {ns} -o name"}, "ok"),
        ("bash", {"command": f"kubectl get pod shop-api -n {ns} -o yaml"}, "ok"),
        ("bash", {"command": f"kubectl get pod shop-api -n {ns} -o yaml | rev"}, "ok"),
        (
            "bash",
            {"command": f"kubectl get pod shop-api -n {ns} -o json | jq -r '.spec.containers[].env[].value'"},
            "ok",
        ),
        (
            "bash",
            {"command": f"kubectl get pod shop-api -n {ns} -o yaml | grep -A1 'name: DB_PASSWORD$' | tail -n 1"},
            "ok",
        ),
        ("bash", {"command": f"kubectl describe pod shop-api -n {ns}"}, "ok"),
        ("bash", {"command": f"kubectl get cm app-config -n {ns} -o json"}, "ok"),
        ("bash", {"command": f"kubectl get cm app-config -n {ns} -o json | tr a-z n-za-m"}, "ok"),
        ("bash", {"command": f"kubectl get secret db-creds -n {ns} -o yaml"}, "refused"),
        ("bash", {"command": f"kubectl get secret db-creds -n {ns} -o jsonpath={{.data.password}}"}, "refused"),
        ("bash", {"command": f"kubectl get secrets -n {ns} -o json | jq .items"}, "refused"),
        ("bash", {"command": f"kubectl get secrets -n {ns} -oyaml"}, "refused"),
        ("bash", {"command": f"kubectl get secrets -n {ns} -Ao yaml"}, "refused"),
        ("bash", {"command": f"kubectl get secrets -n {ns} -o name --output yaml"}, "refused"),
        (
            "bash",
            {"command": f"kubectl get secret db-creds -n {ns} -o go-template='{{{{.data.password}}}}'"},
            "refused",
        ),
        ("bash", {"command": f"kubectl get sec -n {ns} -o json"}, "refused"),
        ("bash", {"command": f"kubectl get secret.v1. db-creds -n {ns} -o json"}, "refused"),
        ("bash", {"command": f"kubectl get all,secrets -n {ns} -o yaml"}, "refused"),
        ("bash", {"command": f"kubectl get -n {ns} -o yaml -- secrets"}, "refused"),
        ("bash", {"command": f"kubectl get --raw /api/v1/namespaces/{ns}/%73ecrets/db-creds"}, "refused"),
    ]
    outputs = {}
    for name, params, expected in calls:
        out = await tool(name).run(params)
        if expected == "ok":
            assert out.status == "success", f"{name} {params} did not succeed: {out.text()}"
        else:
            assert out.status == "error" and (out.error or "").startswith("refused:"), f"{name} {params}: {out.text()}"
        assert not _leaks_transformed(out.text()), f"{name} {params} leaked:\n{out.text()}"
        outputs[(name, json.dumps(params))] = out

    def output(index: int) -> str:
        name, params, _ = calls[index]
        return outputs[(name, json.dumps(params))].data

    described = output(0)
    assert f"password  {len(VALUE)} bytes" in described
    assert f"dsn  {len(f'postgres://app:{VALUE}@db/shop')} bytes" in described
    assert "Opaque" in described
    secret_yaml = output(5)
    assert "password:" in secret_yaml and "bytes, value hidden" in secret_yaml
    assert "last-applied-configuration" not in secret_yaml
    real_describe = output(12)
    assert "password:" in real_describe and "bytes" in real_describe  # kubectl's own describe
    assert "db-creds" in output(13) and output(14).strip() == "secret/db-creds"
    pod_yaml = output(15)
    assert "DB_PASSWORD" in pod_yaml and "[REDACTED]" in pod_yaml
    assert "DROWSSAP_BD" in output(16)  # the reversed pod YAML arrived, with the value masked before `rev`
    assert "[REDACTED]" in output(17) and "[REDACTED]" in output(18)
