"""The Helm chart: it lints, renders, every object it renders is accepted by the real apiserver,
and the ServiceAccount it creates can read the cluster but never Secrets, nor write to it."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from lestrade.localcluster import binary_path, ensure_binaries
from lestrade.resources import GROUP

pytestmark = pytest.mark.binaries("helm")

CHART = Path(__file__).resolve().parents[2] / "charts" / "lestrade"


def helm(*args: str) -> str:
    ensure_binaries(["helm"], quiet=True)
    proc = subprocess.run([str(binary_path("helm")), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def kubectl(cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def render(release: str, namespace: str, values: dict | None = None) -> list[dict]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(values or {}, file)
        file.flush()
        out = helm("template", release, str(CHART), "--namespace", namespace, "--include-crds", "-f", file.name)
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_chart_lints() -> None:
    out = helm("lint", str(CHART), "--strict")
    assert "0 chart(s) failed" in out


def test_defaults_are_secure() -> None:
    docs = render("lestrade", "lestrade-system")
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "CustomResourceDefinition",
    } <= kinds
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = {
        e["name"]: e.get("value")
        for c in deployment["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
    }
    assert env.get("LESTRADE_API_AUTH") == "true"
    assert env.get("LESTRADE_TOOLS_SERVICE_ACCOUNT") == "lestrade-system/lestrade-tools"
    rules = [
        r
        for d in docs
        if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] != "lestrade-delivery-secrets"
        for r in d.get("rules", [])
    ]
    for rule in rules:
        assert "secrets" not in rule.get("resources", []), rule
        assert not ("*" in rule.get("resources", []) and "" in rule.get("apiGroups", [])), rule
    # The one exception: Destinations' credentials, `get` in the release namespace only.
    (delivery,) = [d for d in docs if d["metadata"]["name"] == "lestrade-delivery-secrets" and d["kind"] == "Role"]
    assert delivery["metadata"]["namespace"] == "lestrade-system"
    assert delivery["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert {f"investigations.{GROUP}", f"conversations.{GROUP}"} <= crds


def test_model_list_goes_into_a_secret_not_a_configmap() -> None:
    docs = render(
        "lestrade",
        "lestrade-system",
        {"modelList": {"fast": {"model": "openai/gpt-4.1", "api_key": "{{ env.OPENAI_API_KEY }}"}}},
    )
    text = yaml.safe_dump_all([d for d in docs if d["kind"] == "ConfigMap"])
    assert "gpt-4.1" not in text
    secrets = [d for d in docs if d["kind"] == "Secret"]
    rendered = yaml.safe_dump_all(secrets)
    assert secrets and "gpt-4.1" in rendered
    assert "{{ env.OPENAI_API_KEY }}" in rendered  # left for the container to substitute


@pytest.fixture
def installed(cluster, api_client, namespace) -> Iterator[tuple[str, str]]:
    """The chart's objects applied for real (no CRDs: the session installs them)."""
    release = f"r{uuid.uuid4().hex[:6]}"
    rendered = render(release, namespace)
    crds = [
        d for d in rendered if d["kind"] == "CustomResourceDefinition" and not d["metadata"]["name"].endswith(GROUP)
    ]  # Kopf's peering CRDs
    docs = [d for d in rendered if d["kind"] != "CustomResourceDefinition"]
    if crds:
        applied = kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(crds))
        assert applied.returncode == 0, applied.stderr
        for crd in crds:
            ready = kubectl(
                cluster, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
            )
            assert ready.returncode == 0, ready.stderr
    manifest = yaml.safe_dump_all(docs)
    applied = kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=manifest)
    assert applied.returncode == 0, applied.stderr
    try:
        sa = next(
            d["metadata"]["name"]
            for d in docs
            if d["kind"] == "ServiceAccount" and not d["metadata"]["name"].endswith("-tools")
        )
        yield sa, namespace
    finally:
        kubectl(cluster, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=manifest)


def _can(
    api_client,
    user: str,
    verb: str,
    resource: str,
    namespace: str | None = None,
    group: str = "",
    subresource: str | None = None,
) -> bool:
    review = k8s.AuthorizationV1Api(api_client).create_subject_access_review(
        k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=user,
                groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                resource_attributes=k8s.V1ResourceAttributes(
                    verb=verb, resource=resource, group=group, namespace=namespace, subresource=subresource
                ),
            )
        )
    )
    return bool(review.status.allowed)


def _token_allowed(api_client, user: str, namespace: str, account: str) -> bool:
    review = k8s.AuthorizationV1Api(api_client).create_subject_access_review(
        k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=user,
                groups=["system:serviceaccounts"],
                resource_attributes=k8s.V1ResourceAttributes(
                    verb="create", resource="serviceaccounts", subresource="token", name=account, namespace=namespace
                ),
            )
        )
    )
    return bool(review.status.allowed)


def test_rendered_objects_are_accepted_and_rbac_is_read_only(installed, api_client, crds) -> None:
    sa, namespace = installed
    user = f"system:serviceaccount:{namespace}:{sa}"
    tools = f"system:serviceaccount:{namespace}:{sa}-tools"
    elsewhere = "kube-system"
    # The tools' identity reads the cluster, never Secrets, and changes nothing.
    assert _can(api_client, tools, "list", "pods", elsewhere)
    assert _can(api_client, tools, "get", "pods", elsewhere, subresource="log")
    assert _can(api_client, tools, "list", "events", elsewhere)
    assert _can(api_client, tools, "list", "deployments", elsewhere, group="apps")
    for who in (tools, user):
        assert not _can(api_client, who, "get", "secrets", elsewhere)
        assert not _can(api_client, who, "list", "secrets", elsewhere)
        assert not _can(api_client, who, "delete", "pods", elsewhere)
        assert not _can(api_client, who, "patch", "deployments", elsewhere, group="apps")
        assert not _can(api_client, who, "create", "pods", elsewhere, subresource="exec")
    assert not _can(api_client, tools, "create", "serviceaccounts", namespace, subresource="token")
    assert not _can(api_client, tools, "patch", "investigations", namespace, group=GROUP, subresource="status")
    # The operator runs the resources and mints tokens for the tools' account, and no other.
    assert _can(api_client, user, "patch", "investigations", namespace, group=GROUP, subresource="status")
    assert not _can(api_client, user, "list", "pods", elsewhere)
    assert _token_allowed(api_client, user, namespace, f"{sa}-tools")
    assert not _token_allowed(api_client, user, namespace, sa)
    assert not _token_allowed(api_client, user, elsewhere, "default")


def test_tenancy_rbac_hands_out_only_scoped_reads(installed, api_client, crds) -> None:
    """The operator makes per-scope accounts (tokens only in the scopes namespace) and may bind
    nothing but the read-only role; a scoped account reads cluster-scoped objects such as nodes,
    and no namespace until a RoleBinding puts it there."""
    sa, namespace = installed
    user = f"system:serviceaccount:{namespace}:{sa}"
    scopes = f"{sa}-scopes"
    assert _token_allowed(api_client, user, scopes, "scope-0123456789abcdef")
    assert not _token_allowed(api_client, user, "kube-system", "scope-0123456789abcdef")

    def may_bind(role: str) -> bool:
        review = k8s.AuthorizationV1Api(api_client).create_subject_access_review(
            k8s.V1SubjectAccessReview(
                spec=k8s.V1SubjectAccessReviewSpec(
                    user=user,
                    groups=["system:serviceaccounts"],
                    resource_attributes=k8s.V1ResourceAttributes(
                        verb="bind", group="rbac.authorization.k8s.io", resource="clusterroles", name=role
                    ),
                )
            )
        )
        return bool(review.status.allowed)

    assert may_bind(f"{sa}-tools-read")
    for role in ("cluster-admin", "admin", "edit", f"{sa}-operator"):
        assert not may_bind(role)
    assert _can(api_client, user, "create", "rolebindings", "kube-system", group="rbac.authorization.k8s.io")
    assert not _can(api_client, user, "create", "roles", "kube-system", group="rbac.authorization.k8s.io")

    scoped = f"system:serviceaccount:{scopes}:scope-0123456789abcdef"
    review = k8s.AuthorizationV1Api(api_client)

    def scoped_can(verb: str, resource: str, ns: str | None) -> bool:
        spec = k8s.V1SubjectAccessReviewSpec(
            user=scoped,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{scopes}"],
            resource_attributes=k8s.V1ResourceAttributes(verb=verb, resource=resource, namespace=ns),
        )
        return bool(review.create_subject_access_review(k8s.V1SubjectAccessReview(spec=spec)).status.allowed)

    assert scoped_can("list", "nodes", None)
    assert not scoped_can("list", "namespaces", None)
    for ns in ("kube-system", namespace):
        assert not scoped_can("list", "pods", ns)
        assert not scoped_can("get", "secrets", ns)


def test_mcp_server_sharing_and_header_secrets_are_opt_in() -> None:
    from lestrade.operator.tenancy.scopes import POLICY_KEY, parse_policy

    docs = render(
        "lestrade",
        "lestrade-system",
        {"tenancy": {"mcpServers": [{"servers": ["platform/grafana"], "fromNamespaces": ["team-a"]}]}},
    )
    policy = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-scope-policy"))
    parsed = parse_policy(policy["data"][POLICY_KEY])
    assert parsed.error is None and [g.servers for g in parsed.shared_mcp("team-a", None)] == [("platform/grafana",)]
    operator_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d.get("rules", [])]
    assert any("mcpservers/status" in r.get("resources", []) for r in operator_rules)
    opted = render("lestrade", "lestrade-system", {"mcpServers": {"readHeaderSecrets": True}})
    secret_rules = [
        r
        for d in opted
        if d["kind"] == "ClusterRole"
        for r in d.get("rules", [])
        if "secrets" in r.get("resources", [])
    ]
    assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


def test_delivery_slack_and_tracing_values() -> None:
    """Destinations from values (each with a consenting Secret), the Slack signing secret and
    user map for the API, the tracing variables for the operator, and the egress they need."""
    docs = render(
        "lestrade",
        "lestrade-system",
        {
            "delivery": {
                "consoleUrl": "https://lestrade.example",
                "secretNamespaces": ["team-a"],
                "apiUrl": "https://api.example",
                "destinations": [
                    {
                        "name": "ops-slack",
                        "secretData": {"url": "https://hooks.slack.com/services/T/B/X"},
                        "spec": {
                            "type": "Slack",
                            "slack": {"webhookUrlSecretRef": {"name": "ops-slack", "key": "url"}},
                        },
                    }
                ],
            },
            "slack": {"signingSecret": "abc", "users": {"U1": "alice@example.com"}},
            "tracing": {"enabled": True, "endpoint": "http://collector.obs:4318"},
            "networkPolicy": {
                "egress": {
                    "tracing": {
                        "to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                        "ports": [{"port": 4318, "protocol": "TCP"}],
                    }
                }
            },
        },
    )
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert by[("Secret", "ops-slack")]["metadata"]["labels"]["lestrade.dev/destination"] == "true"
    assert by[("Destination", "ops-slack")]["spec"]["type"] == "Slack"
    assert by[("Secret", "lestrade-slack")]["stringData"] == {"signingSecret": "abc"}
    assert by[("ConfigMap", "lestrade-slack-users")]["data"] == {"U1": "alice@example.com"}
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "lestrade-delivery-secrets"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["lestrade-system", "team-a"]
    containers = {c["name"]: c for c in by[("Deployment", "lestrade")]["spec"]["template"]["spec"]["containers"]}
    operator_env = {e["name"]: e.get("value") for e in containers["operator"]["env"]}
    assert operator_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector.obs:4318"
    assert operator_env["LESTRADE_CONSOLE_URL"] == "https://lestrade.example"
    assert operator_env["LESTRADE_API_URL"] == "https://api.example"
    key = by[("Secret", "lestrade-decision-key")]["data"]["key"]
    assert len(key) >= 64  # 48 random characters, base64
    for container in ("operator", "api"):
        assert {e["name"]: e.get("value") for e in containers[container]["env"]}[
            "LESTRADE_DECISION_KEY_FILE"
        ] == "/etc/lestrade/decision-key/key"
        assert {"name": "decision-key", "mountPath": "/etc/lestrade/decision-key", "readOnly": True} in containers[
            container
        ]["volumeMounts"]
    api_env = {e["name"]: e.get("value") for e in containers["api"]["env"]}
    assert api_env["LESTRADE_SLACK_SIGNING_SECRET_FILE"] == "/etc/lestrade/slack/signingSecret"
    assert api_env["LESTRADE_SLACK_USER_MAP"] == "lestrade-system/lestrade-slack-users"
    assert {"name": "slack", "mountPath": "/etc/lestrade/slack", "readOnly": True} in containers["api"]["volumeMounts"]
    egress = by[("NetworkPolicy", "lestrade")]["spec"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 4318, "protocol": "TCP"}]} in egress
    assert any(r["ports"] == [{"port": 443, "protocol": "TCP"}] for r in egress)
    # Off by default: no tracing variables, no Slack endpoint.
    defaults = render("lestrade", "lestrade-system")
    default_env = {
        e["name"]
        for d in defaults
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
    }
    assert (
        not {n for n in default_env if n.startswith("OTEL_")}
        and "LESTRADE_SLACK_SIGNING_SECRET_FILE" not in default_env
    )
