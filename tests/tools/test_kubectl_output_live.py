"""Credentials outside Secrets never reach the model through the bash tool's kubectl (issue 29),
whatever output format or layout prints them: the real tool, the pinned kubectl, a real
apiserver. The attacker controls a ConfigMap, a pod's env and args, annotations and an Event."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.build import binary_path
from lestrade.operator.tools.bash.tool import bash_toolset

PLANTED = "Pl4nted-V4lue"
SPACED = f"{PLANTED} with spaces;and-more"
PEM = f"-----BEGIN PRIVATE KEY-----\nMIIE{PLANTED}\n-----END PRIVATE KEY-----\n"


def _leaks(text: str) -> bool:
    return any(p in text for p in (PLANTED, PLANTED[::-1], "with spaces;and-more", PLANTED.upper(), PLANTED.lower()))


@pytest.fixture
def world(api_client: k8s.ApiClient, namespace: str, make_pod: Any) -> str:
    core = k8s.CoreV1Api(api_client)
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"DB_PASSWORD": SPACED}}
    core.create_namespaced_config_map(
        namespace,
        k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(
                name="app",
                annotations={
                    "kubectl.kubernetes.io/last-applied-configuration": json.dumps(manifest),
                    "api-token": PLANTED,
                },
            ),
            data={
                "DB_PASSWORD": SPACED,
                "tls.key": PEM,
                "server.pem": PEM,
                "level": "info-level",
                "app.properties": f"db.password={SPACED}\nport=80\n",
                "folded.yaml": f"password: {PLANTED}\n  continued-{PLANTED}\n",
            },
        ),
    )
    make_pod(
        namespace,
        "web",
        containers=[
            k8s.V1Container(
                name="app",
                image="example.com/shop:1",
                command=["sh", "-c", f"sshpass -p {PLANTED} ssh db"],
                args=["--db-password", PLANTED, f"--api-key={PLANTED}"],
                env=[k8s.V1EnvVar(name="DB_PASSWORD", value=SPACED), k8s.V1EnvVar(name="LEVEL", value="debug")],
            )
        ],
    )
    core.create_namespaced_event(
        namespace,
        k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name="web.login"),
            involved_object=k8s.V1ObjectReference(kind="Pod", name="web", namespace=namespace),
            reason="LoginFailed",
            message=f"db login failed: password is {PLANTED}",
            type="Warning",
        ),
    )
    return namespace


COMMANDS = [
    "kubectl get cm app -n NS -o jsonpath={.data.DB_PASSWORD}",
    "kubectl get cm app -n NS -o jsonpath={.data}",
    "kubectl get cm app -n NS -o jsonpath='{.data.tls\\.key}{.data.server\\.pem}'",
    "kubectl get cm app -n NS -o jsonpath='{.data.app\\.properties}{.data.folded\\.yaml}'",
    "kubectl get cm app -n NS -o jsonpath={.metadata.annotations}",
    "kubectl get cm -n NS -o custom-columns=P:.data.DB_PASSWORD,K:.data.tls\\.key,A:.metadata.annotations",
    "kubectl get cm app -n NS -o yaml",
    "kubectl get cm app -n NS -o json",
    "kubectl get cm app -n NS -ojson | jq -r '.data[]'",
    "kubectl get cm app -n NS -o jsonpath={.data.DB_PASSWORD} | rev",
    "kubectl describe configmap app -n NS",
    "kubectl get pod web -n NS -o jsonpath='{.spec.containers[0].env[*].value}'",
    "kubectl get pod web -n NS -o jsonpath='{.spec.containers[0].args}{.spec.containers[0].command}'",
    "kubectl get pod web -n NS -o jsonpath-as-json='{..value}'",
    "kubectl get pods -n NS -o custom-columns=ARGS:.spec.containers[*].args,CMD:.spec.containers[*].command",
    "kubectl get pod web -n NS -o yaml",
    "kubectl describe pod web -n NS",
    "kubectl get events -n NS",
    "kubectl events -n NS",
    "kubectl get events -n NS -o jsonpath={.items[*].message}",
    "kubectl get --raw /api/v1/namespaces/NS/configmaps/app",
    "timeout 20 kubectl get cm app -n NS -o jsonpath={.data.DB_PASSWORD}",
]


@pytest.fixture
def bash(cluster: Any) -> Any:
    kubectl = binary_path("kubectl")
    [tool] = bash_toolset(
        env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": f"{kubectl.parent}:{os.environ.get('PATH', '')}"}
    ).tools
    return tool


@pytest.mark.parametrize("command", COMMANDS)
async def test_no_format_or_layout_prints_a_planted_credential(bash: Any, world: str, command: str) -> None:
    out = await bash.run({"command": command.replace("NS", world)})
    assert out.status == "success", out.text()
    assert not _leaks(out.text()), out.text()


async def test_what_is_not_a_credential_still_prints(bash: Any, world: str) -> None:
    level = await bash.run({"command": f"kubectl get cm app -n {world} -o jsonpath={{.data.level}}"})
    assert level.data.strip() == "info-level", level.text()
    env = await bash.run(
        {"command": f"kubectl get pod web -n {world} -o jsonpath={{.spec.containers[0].env[1].value}}"}
    )
    assert env.data.strip() == "debug", env.text()
    cols = await bash.run(
        {"command": f"kubectl get pods -n {world} -o custom-columns=NAME:.metadata.name --no-headers"}
    )
    assert cols.data.split() == ["web"], cols.text()
    described = await bash.run({"command": f"kubectl describe configmap app -n {world}"})
    assert "DB_PASSWORD:" in described.data and "level:" in described.data and "info-level" in described.data


@pytest.mark.parametrize(
    "command",
    [
        "kubectl get cm app -n NS -o go-template={{.data.DB_PASSWORD}}",
        "kubectl get cm app -n NS -o template={{.data.DB_PASSWORD}}",
        "kubectl get cm app -n NS --template={{.data.DB_PASSWORD}}",
        "kubectl get cm app -n NS -o templatefile=/etc/hostname",
        "kubectl get cm app -n NS -o go-template-file=/etc/hostname",
        "kubectl get cm app -n NS -o jsonpath-file=/etc/hostname",
    ],
)
async def test_go_templates_and_file_formats_are_refused(bash: Any, world: str, command: str) -> None:
    assert not bash.needs_approval({"command": command})  # refused outright: nothing to approve
    out = await bash.run({"command": command.replace("NS", world)})
    assert out.status == "error" and out.error.startswith("refused:"), out.text()
