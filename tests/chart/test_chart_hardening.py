"""What an operator of a production cluster expects of the chart: hardened pods for every
workload (the Deployment and the Jobs the operator starts from the chart's pod template), a
values schema that rejects bad values with a clear message, probes, sized resources, a
NetworkPolicy, a PodDisruptionBudget, an optional ServiceMonitor, topology spread and a model
list from an existing Secret; everything rendered is accepted by the real apiserver."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from lestrade.localcluster import binary_path, ensure_binaries
from lestrade.operator.base.settings import JobSettings, OperatorSettings
from lestrade.operator.runs.jobs import job_manifest
from lestrade.runs.views import view_of

pytestmark = pytest.mark.binaries("helm")

CHART = Path(__file__).resolve().parents[2] / "charts" / "lestrade"

EVERYTHING_ON = {
    "replicas": 2,
    "operator": {"jobMode": True},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "existingSecret": "my-models",
    "tools": {"prometheusUrl": "http://prometheus.monitoring:9090"},
    "tenancy": {
        "mutatingPolicy": True,
        "grants": [
            {"groups": ["sre"], "namespaces": ["*"]},
            {"fromNamespaces": ["team-a"], "namespaces": ["team-a-db"]},
        ],
    },
}
VARIANTS = {
    "defaults": {},
    "everything-on": EVERYTHING_ON,
    "models-no-api": {
        "modelList": {"fast": {"model": "openai/gpt-4.1"}},
        "api": {"enabled": False},
        "operator": {"jobMode": True},
    },
}


def helm_template(
    values: dict[str, Any], namespace: str = "lestrade-system", release: str = "lestrade"
) -> subprocess.CompletedProcess[str]:
    ensure_binaries(["helm"], quiet=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(values, file)
        file.flush()
        return subprocess.run(
            [
                str(binary_path("helm")),
                "template",
                release,
                str(CHART),
                "--namespace",
                namespace,
                "--include-crds",
                "-f",
                file.name,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )


def render(values: dict[str, Any], **kw: str) -> list[dict[str, Any]]:
    proc = helm_template(values, **kw)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def job_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod of a Job exactly as the operator builds it from the chart's pod template."""
    (template,) = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-job-template")]
    settings = OperatorSettings(
        jobs=JobSettings(
            pod_template=yaml.safe_load(template["data"]["pod.yaml"]),
            image="lestrade:test",
            namespace="lestrade-system",
        )
    )
    ref = view_of(
        {
            "apiVersion": "lestrade.dev/v1alpha1",
            "kind": "Investigation",
            "metadata": {"name": "inv", "namespace": "lestrade-system", "uid": "u-1", "generation": 1},
            "spec": {"title": "t"},
        }
    ).ref
    return job_manifest(settings, ref, 1, 60)["spec"]["template"]


def workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod spec the chart makes run: the Deployment's, and the Jobs' when jobMode is on."""
    pods = {"deployment": of_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]}
    if any(d["metadata"]["name"].endswith("-job-template") for d in of_kind(docs, "ConfigMap")):
        pods["job"] = job_pod(docs)["spec"]
    return pods


@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_every_pod_is_hardened(values: dict[str, Any]) -> None:
    pods = workloads(render(values))
    assert ("job" in pods) == bool((values.get("operator") or {}).get("jobMode"))
    for where, pod in pods.items():
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] > 0, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        scratch = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for container in pod["containers"]:
            what = f"{where}/{container['name']}"
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, what
            assert sc["allowPrivilegeEscalation"] is False, what
            assert sc["capabilities"] == {"drop": ["ALL"]}, what
            assert sc["runAsNonRoot"] is True and sc["seccompProfile"]["type"] == "RuntimeDefault", what
            # The tools' private work folders and kubeconfigs are made with tempfile (under
            # /tmp), and HOME points there too: /tmp must be a writable emptyDir.
            tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp and tmp[0]["name"] in scratch, what
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["HOME"] == "/tmp", what
            resources = container["resources"]
            assert resources["requests"]["memory"] and resources["requests"]["cpu"], what
            assert resources["limits"]["memory"], what


@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_lint_is_strictly_clean_for_every_variant(values: dict[str, Any]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(values, file)
        file.flush()
        proc = subprocess.run(
            [str(binary_path("helm")), "lint", "--strict", str(CHART), "-f", file.name],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0 and "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


def test_probes_resources_and_spread() -> None:
    docs = render({})
    (deployment,) = of_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    operator, api = containers["operator"], containers["api"]
    health = next(a for a in operator["args"] if a.startswith("--liveness="))
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    assert health == f"--liveness=http://0.0.0.0:{ports['health']}/healthz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert env["LESTRADE_METRICS_PORT"] == str(ports["metrics"])
    # sized from measurement: the operator is ~240 MiB RSS once imported
    assert operator["resources"]["requests"]["memory"] == "384Mi"
    assert "cpu" not in operator["resources"]["limits"]
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert all(c["whenUnsatisfiable"] == "ScheduleAnyway" for c in pod["topologySpreadConstraints"])
    (pdb,) = of_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert not of_kind(docs, "ServiceMonitor")
    own = [{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]
    pod = of_kind(render({"topologySpreadConstraints": own}), "Deployment")[0]["spec"]["template"]["spec"]
    assert pod["topologySpreadConstraints"] == own


def test_network_policy_allows_only_the_configured_egress() -> None:
    docs = render({"operator": {"jobMode": True}})
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    assert set(policies) == {"lestrade", "lestrade-jobs"}
    main = policies["lestrade"]
    assert main["policyTypes"] == ["Ingress", "Egress"]
    egress_ports = [sorted((p["port"], p["protocol"]) for p in rule["ports"]) for rule in main["egress"]]
    assert sorted(egress_ports) == sorted(
        [
            [(443, "TCP"), (6443, "TCP")],  # the apiserver
            [(53, "TCP"), (53, "UDP")],  # DNS
            [(443, "TCP")],  # the models
            [(9090, "TCP")],  # Prometheus
            [(443, "TCP")],  # the Destinations (webhooks, Slack, Teams)
            [(9093, "TCP")],  # Alertmanager
        ]
    )
    assert policies["lestrade-jobs"]["egress"] == main["egress"]
    assert policies["lestrade-jobs"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "run-job"
    ingress_ports = sorted(p["port"] for rule in main["ingress"] for p in rule["ports"])
    assert ingress_ports == [8080, 8081, 9102]  # API, health (probes), metrics
    narrowed = render(
        {
            "networkPolicy": {
                "egress": {
                    "prometheus": None,
                    "alertmanager": None,
                    "models": {
                        "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
                        "ports": [{"port": 8443, "protocol": "TCP"}],
                    },
                }
            }
        }
    )
    (spec,) = [p["spec"] for p in of_kind(narrowed, "NetworkPolicy")]
    assert len(spec["egress"]) == 4
    assert {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 8443, "protocol": "TCP"}]} in spec[
        "egress"
    ]
    assert not of_kind(render({"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def test_existing_secret_replaces_the_charts_model_secret() -> None:
    docs = render(EVERYTHING_ON)
    assert not of_kind(docs, "Secret")
    for where, pod in workloads(docs).items():
        (volume,) = [v for v in pod["volumes"] if v["name"] == "models"]
        assert volume["secret"]["secretName"] == "my-models", where
        assert volume["secret"]["items"] == [{"key": "modelList.yaml", "path": "modelList.yaml"}]
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["LESTRADE_MODEL_LIST"] == "/etc/lestrade/models/modelList.yaml", where
    (monitor,) = of_kind(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics", "http"]
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    metrics = services["lestrade-metrics"]
    assert all(metrics["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())


@pytest.mark.parametrize(
    "values, message",
    [
        ({"replicas": "two"}, "at '/replicas': got string, want integer"),
        ({"operator": {"concurency": 3}}, "additional properties 'concurency' not allowed"),
        ({"operator": {"concurrency": 0}}, "at '/operator/concurrency'"),
        ({"operator": {"defaultTimeout": "half an hour"}}, "at '/operator/defaultTimeout'"),
        ({"operator": {"resources": {"requests": {"memory": "lots"}}}}, "at '/operator/resources/requests/memory'"),
        ({"api": {"port": 70000}}, "at '/api/port'"),
        ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
        ({"tools": {"prometheusUrl": "prometheus:9090"}}, "at '/tools/prometheusUrl'"),
        ({"networkPolicy": {"egress": {"dns": {"ports": []}}}}, "at '/networkPolicy/egress/dns/ports'"),
        ({"modelList": {"fast": {"api_key": "x"}}}, "missing property 'model'"),
        (
            {"modelList": {"fast": {"model": "openai/gpt-4.1"}}, "existingSecret": "mine"},
            "set either modelList or existingSecret",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_values_fail_with_a_clear_message(values: dict[str, Any], message: str) -> None:
    proc = helm_template(values)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_helm_install_refuses_a_bad_value(cluster: Any, namespace: str) -> None:
    """`helm install` (not only `template`) checks the schema before it touches the cluster."""
    ensure_binaries(["helm"], quiet=True)
    proc = subprocess.run(
        [
            str(binary_path("helm")),
            "install",
            "bad",
            str(CHART),
            "--namespace",
            namespace,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--dry-run=server",
            "--set",
            "api.port=http",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert "at '/api/port': got string, want integer" in proc.stderr, proc.stderr


def test_every_value_is_typed_and_described() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def check(value: Any, node: dict[str, Any], path: str) -> None:
        assert "description" in node and "type" in node, path
        if isinstance(value, dict) and "properties" in node:
            for key, child in value.items():
                assert key in node["properties"], f"{path}.{key} is not in values.schema.json"
                check(child, node["properties"][key], f"{path}.{key}")

    for key, value in defaults.items():
        assert key in schema["properties"], f"{key} is not in values.schema.json"
        check(value, schema["properties"][key], key)
    assert schema["additionalProperties"] is False


def kubectl(cluster: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def apply_peering_crds(cluster: Any, docs: list[dict[str, Any]]) -> None:
    crds = [d for d in of_kind(docs, "CustomResourceDefinition") if d["spec"]["group"] == "kopf.dev"]
    applied = kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(crds))
    assert applied.returncode == 0, applied.stderr
    for crd in crds:
        ready = kubectl(
            cluster, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
        )
        assert ready.returncode == 0, ready.stderr


@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_the_apiserver_accepts_everything_rendered(
    values: dict[str, Any], cluster: Any, crds: None, namespace: str
) -> None:
    docs = render(values, namespace=namespace, release=f"dry{abs(hash(namespace)) % 10000}")
    apply_peering_crds(cluster, docs)
    # ServiceMonitor: the Prometheus Operator's CRD is not part of the local control plane.
    objects = [d for d in docs if d["kind"] not in ("CustomResourceDefinition", "ServiceMonitor")]
    # Namespaces the chart creates (tenancy's scopes namespace) must exist for a dry run of
    # the objects inside them, as they would after Helm created them first.
    namespaces = [d for d in objects if d["kind"] == "Namespace"]
    if namespaces:
        made = kubectl(
            cluster,
            "apply",
            "--server-side",
            "--field-manager=chart-test",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(namespaces),
        )
        assert made.returncode == 0, made.stderr
    try:
        dry = kubectl(
            cluster,
            "apply",
            "--server-side",
            "--dry-run=server",
            "--validate=strict",
            "--field-manager=chart-test",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(objects),
        )
    finally:
        for ns in namespaces:
            kubectl(cluster, "delete", "namespace", ns["metadata"]["name"], "--wait=false", "--ignore-not-found")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("(server dry run)") == len(objects)


def test_trigger_budget_and_hosted_values_reach_the_processes_as_they_read_them() -> None:
    from lestrade.api.alertmanager import AlertReceiverSettings
    from lestrade.api.hosted.accounts import HostedSettings

    docs = render(
        {
            "operator": {"namespaceSpendLimit": "tokens=500000,cost=20,window=24h"},
            "api": {
                "alertRoutesAllNamespaces": True,
                "hosted": {"accountId": "acme", "clusterNames": ["prod", "stage"]},
            },
        }
    )
    containers = {c["name"]: c for c in workloads(docs)["deployment"]["containers"]}
    env = {name: {e["name"]: e.get("value", "") for e in c["env"]} for name, c in containers.items()}
    operator = OperatorSettings.from_env(env["operator"])
    assert operator.spend.namespace_limit == "tokens=500000,cost=20,window=24h"
    assert AlertReceiverSettings.from_env(env["api"]).all_namespaces is True
    # the operator explains routes by the same policy the API matches by
    assert env["operator"]["LESTRADE_ALERT_ROUTES_ALL_NAMESPACES"] == "true"
    listed = {
        c["name"]: {e["name"]: e.get("value", "") for e in c["env"]}
        for c in workloads(render({"api": {"alertRoutesAnyNamespaces": ["platform", "sre"]}}))["deployment"][
            "containers"
        ]
    }
    for container in ("api", "operator"):
        assert AlertReceiverSettings.from_env(listed[container]).any_namespaces == ("platform", "sre")
    hosted = HostedSettings.from_env(env["api"])
    assert hosted.account_id == "acme" and hosted.clusters == ("prod", "stage")
    # Unset, they stay unset: any account, the routes of the release namespace only.
    (api,) = [c for c in workloads(render({}))["deployment"]["containers"] if c["name"] == "api"]
    plain = {e["name"]: e.get("value", "") for e in api["env"]}
    assert HostedSettings.from_env(plain).account_id is None
    assert AlertReceiverSettings.from_env(plain).all_namespaces is False
