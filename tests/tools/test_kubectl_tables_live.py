"""`kubectl get`'s tables in the bash tool reach the model only with their cells masked by the
structural rules (issue 29): a printer column can show any field — a CRD's password, a
ConfigMap-style value, env literals in `-o wide` — and there the value stands without its key,
so no text rule can tell it from a status word. The real tool, the pinned kubectl and a real
apiserver; the kubectl_* tools' tables (the same `KubeApi.table`) too."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.build import binary_path
from lestrade.localcluster.processes import wait_until
from lestrade.operator.tools.bash.tool import bash_toolset
from lestrade.operator.tools.kubernetes.toolset import kubernetes_toolset

PLANTED = "Pl4nted-T4ble-V4lue"
SHORT = "zq9x"  # a short password: masked as a word, not every `zq9x` inside other words


def _leaks(text: str) -> bool:
    return PLANTED in text or PLANTED[::-1] in text or f" {SHORT} " in f" {text} "


def _crd(group: str, plural: str, kind: str) -> dict[str, Any]:
    # PASSWORD last: the text rules take the header after it for its value
    columns = [
        {"name": "Level", "type": "string", "jsonPath": ".spec.level"},
        {"name": "DB", "type": "string", "jsonPath": ".spec.data.DB_PASSWORD"},
        {"name": "Config", "type": "string", "jsonPath": ".spec.data"},
        {"name": "Tok", "type": "string", "jsonPath": ".spec.token"},
        {
            "name": "Env",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.template.spec.containers[*].env[*].value",
        },
        {"name": "Args", "type": "string", "priority": 1, "jsonPath": ".spec.template.spec.containers[*].args"},
        {"name": "Password", "type": "string", "jsonPath": ".spec.password"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def widget_kind(api_client: k8s.ApiClient) -> Iterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    group, plural, kind = f"tables{suffix}.example.com", f"widgets{suffix}", f"Widget{suffix}"
    ext = k8s.ApiextensionsV1Api(api_client)
    ext.create_custom_resource_definition(_crd(group, plural, kind))

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{plural}.{group}")
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    try:
        wait_until("the CRD to be established", established, 60)
        yield group, plural
    finally:
        ext.delete_custom_resource_definition(f"{plural}.{group}")


@pytest.fixture
def world(api_client: k8s.ApiClient, namespace: str, widget_kind: tuple[str, str]) -> dict[str, str]:
    group, plural = widget_kind
    custom = k8s.CustomObjectsApi(api_client)
    container = {
        "name": "app",
        "image": "example.com/app:1",
        "args": ["--db-password", PLANTED],
        "env": [{"name": "DB_PASSWORD", "value": PLANTED}, {"name": "LEVEL", "value": "debug-level"}],
    }
    for name in ("gadget", "gizmo"):
        custom.create_namespaced_custom_object(
            group,
            "v1",
            namespace,
            plural,
            {
                "apiVersion": f"{group}/v1",
                "kind": plural.replace("widgets", "Widget"),
                "metadata": {"name": name},
                "spec": {
                    "password": PLANTED,
                    "token": SHORT,
                    "level": "info-level",
                    "data": {"DB_PASSWORD": PLANTED, "mode": "fast"},
                    "template": {"spec": {"containers": [container]}},
                },
            },
        )
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace, k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="gadget-db"), string_data={"password": PLANTED})
    )
    core.create_namespaced_event(
        namespace,
        k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name="gadget.login"),
            involved_object=k8s.V1ObjectReference(kind="Pod", name="gadget", namespace=namespace),
            reason="LoginFailed",
            message=f"db login failed: password is {PLANTED}",
            type="Warning",
        ),
    )
    return {"ns": namespace, "plural": plural, "group": group}


@pytest.fixture
def bash(cluster: Any) -> Any:
    kubectl = binary_path("kubectl")
    [tool] = bash_toolset(
        env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": f"{kubectl.parent}:{os.environ.get('PATH', '')}"}
    ).tools
    return tool


COMMANDS = [
    "kubectl get PLURAL -n NS",
    "kubectl get PLURAL gadget -n NS",
    "kubectl get PLURAL -n NS -o wide",
    "kubectl get PLURAL.GROUP -A -o wide --show-labels",
    "kubectl get PLURAL -n NS -o wide --no-headers | grep gadget",
    "kubectl get PLURAL -n NS -o wide | rev",
    "kubectl get PLURAL,events -n NS -o wide",
    "kubectl get events -n NS",
    "kubectl get secrets -n NS -o wide --show-labels",  # kubectl lists them as JSON first: never printed
    "kubectl get secret,PLURAL -n NS | rev",
]


@pytest.mark.parametrize("command", COMMANDS)
async def test_no_table_cell_prints_a_planted_credential(bash: Any, world: dict[str, str], command: str) -> None:
    concrete = command.replace("PLURAL", world["plural"]).replace("GROUP", world["group"]).replace("NS", world["ns"])
    out = await bash.run({"command": concrete})
    assert out.status == "success", out.text()
    assert "gadget" in out.text()[:: -1 if "rev" in command else 1], out.text()  # the table is there
    assert not _leaks(out.text()), out.text()


async def test_tables_still_show_what_is_not_a_credential(bash: Any, world: dict[str, str]) -> None:
    out = await bash.run({"command": f"kubectl get {world['plural']} -n {world['ns']} -o wide"})
    lines = out.text().splitlines()
    assert lines[0].split() == ["NAME", "LEVEL", "DB", "CONFIG", "TOK", "ENV", "ARGS", "PASSWORD"], out.text()
    assert [line.split()[0] for line in lines[1:]] == ["gadget", "gizmo"], out.text()
    assert lines[1].split()[1] == "info-level" and '"mode":"fast"' in lines[1], out.text()
    assert lines[1].count("[REDACTED]") >= 5, out.text()  # DB, the map's value, TOK, PASSWORD, ENV, ARGS
    narrow = await bash.run({"command": f"kubectl get {world['plural']} -n {world['ns']} --no-headers"})
    assert "--db-password" not in narrow.text(), narrow.text()  # priority 1 columns: `-o wide` only
    assert narrow.text().split()[:2] == ["gadget", "info-level"], narrow.text()
    kinds = await bash.run({"command": f"kubectl get {world['plural']},events -n {world['ns']}"})
    assert f"widget{world['plural'][7:]}.{world['group']}/gadget" in kinds.text(), kinds.text()
    none = await bash.run({"command": f"kubectl get {world['plural']} -n {world['ns']} -l nothing=here"})
    assert none.text().strip() == "No resources found.", none.text()


async def test_the_kubectl_tools_tables_are_masked_the_same_way(
    api_client: k8s.ApiClient, world: dict[str, str]
) -> None:
    tools = {t.name: t for t in kubernetes_toolset(api_client).tools}
    outs = [
        await tools["kubectl_get_by_kind_in_namespace"].run({"kind": world["plural"], "namespace": world["ns"]}),
        await tools["kubectl_get_by_name"].run({"kind": world["plural"], "name": "gadget", "namespace": world["ns"]}),
        await tools["kubectl_get_by_kind_in_cluster"].run({"kind": world["plural"]}),
    ]
    for out in outs:
        assert "gadget" in out.text() and "info-level" in out.text(), out.text()
        assert not _leaks(out.text()), out.text()


async def test_all_namespaces_is_one_masked_list(bash: Any, world: dict[str, str], api_client: k8s.ApiClient) -> None:
    custom = k8s.CustomObjectsApi(api_client)
    body = {
        "apiVersion": f"{world['group']}/v1",
        "kind": world["plural"].replace("widgets", "Widget"),
        "metadata": {"name": f"elsewhere-{world['ns'][-6:]}"},
        "spec": {"password": PLANTED, "level": "warn-level"},
    }
    custom.create_namespaced_custom_object(world["group"], "v1", "default", world["plural"], body)
    try:
        out = await bash.run({"command": f"kubectl get {world['plural']} -A -o wide"})
        lines = out.text().splitlines()
        assert lines[0].split()[:3] == ["NAMESPACE", "NAME", "LEVEL"], out.text()
        pairs = {tuple(line.split()[:2]) for line in lines[1:]}
        assert {(world["ns"], "gadget"), ("default", body["metadata"]["name"])} <= pairs, out.text()
        assert "warn-level" in out.text() and not _leaks(out.text()), out.text()
    finally:
        custom.delete_namespaced_custom_object(
            world["group"], "v1", "default", world["plural"], body["metadata"]["name"]
        )
