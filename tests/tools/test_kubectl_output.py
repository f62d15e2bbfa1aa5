"""kubectl's data output in the bash tool: masked objects first, then rendered (issue 29).

Unit level: the command rewrite, the renderer and the refusals. The same paths against a real
kubectl and apiserver are in `test_kubectl_output_live.py`.
"""

from __future__ import annotations

import json

import pytest
import yaml

from lestrade.operator.tools.bash.jsonpath import JsonPathError, render_custom_columns, render_jsonpath
from lestrade.operator.tools.bash.kubectl_output import KubectlOutputRefused, output_plan, render_output
from lestrade.operator.tools.bash.policy import evaluate_text
from lestrade.operator.tools.redact import REDACTED, redact

PLANTED = "pl4nted-Value;with spaces"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEplanted0\n-----END RSA PRIVATE KEY-----\n"

CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "app",
        "namespace": "shop",
        "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                {"kind": "ConfigMap", "data": {"DB_PASSWORD": PLANTED}}
            ),
        },
    },
    "data": {
        "DB_PASSWORD": PLANTED,
        "tls.key": PEM,
        "server.pem": PEM,
        "app.properties": f"db.password={PLANTED}\nport=80",
        "level": "info",
    },
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {
        "containers": [
            {
                "name": "c",
                "image": "x",
                "env": [{"name": "API_TOKEN", "value": PLANTED}, {"name": "LEVEL", "value": "debug"}],
                "args": ["--db-password", PLANTED, "--token=" + PLANTED.split(";")[0], "sshpass", "-p", PLANTED],
            }
        ]
    },
}
LIST = {"apiVersion": "v1", "kind": "List", "items": [CONFIGMAP, POD]}
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "data": {"password": "cGw0bnRlZA=="}}


def _render(command: str, obj: object) -> str:
    plan = output_plan(command.split())
    assert plan is not None
    assert plan.argv[-2:] == ["-o", "json"]  # kubectl itself never renders the data
    return render_output(plan, json.dumps(obj))


FORMATS = [
    "kubectl get cm,pods -o json",
    "kubectl get cm,pods -o yaml",
    "kubectl get cm,pods -oyaml",
    "kubectl get cm,pods -Ao yaml",
    "kubectl get cm,pods --output=json",
    "kubectl get cm,pods -o jsonpath={.items[*].data}",
    "kubectl get cm,pods -o jsonpath={.items[0].data.DB_PASSWORD}",
    "kubectl get cm,pods -o jsonpath={.items[0].data['tls\\.key']}",
    "kubectl get cm,pods -o jsonpath={..value}",
    "kubectl get cm,pods -o jsonpath={..args}",
    "kubectl get cm,pods -o=jsonpath={range.items[*]}{.data.app\\.properties}{end}",
    "kubectl get cm,pods -o jsonpath --template={.items[0].data.server\\.pem}",
    "kubectl get cm,pods -o jsonpath-as-json={.items[*].spec.containers[*].env[*].value}",
    "kubectl get cm,pods -o custom-columns=P:.data.DB_PASSWORD,E:.spec.containers[*].env[*].value",
    "kubectl get cm,pods -o custom-columns=A:.spec.containers[0].args[*] --no-headers",
    "kubectl get cm,pods -o jsonpath={.items[0].metadata.annotations}",
]


@pytest.mark.parametrize("command", FORMATS)
def test_every_data_format_renders_from_masked_objects(command: str) -> None:
    out = _render(command, LIST)
    for piece in (PLANTED, "pl4nted", "MIIEplanted0", "with spaces"):
        assert piece not in out, out
    # and the text rules, applied after, change nothing that matters: the object was safe already
    assert "pl4nted" not in redact(out)


def test_formats_keep_what_is_not_a_credential() -> None:
    assert _render("kubectl get cm -o jsonpath={.items[0].data.level}", LIST) == "info"
    assert _render("kubectl get cm -o jsonpath={.items[*].metadata.name}", LIST) == "app web"
    out = _render("kubectl get cm -o custom-columns=NAME:.metadata.name,ENV:.spec.containers[0].env[1].value", LIST)
    assert out.splitlines()[0].split() == ["NAME", "ENV"] and out.splitlines()[2].split() == ["web", "debug"]
    assert yaml.safe_load(_render("kubectl get pod web -o yaml", POD))["spec"]["containers"][0]["env"][0] == {
        "name": "API_TOKEN",
        "value": REDACTED,
    }


def test_secrets_in_any_data_format_show_sizes_only() -> None:
    out = _render("kubectl get -f x.yaml -o json", {"kind": "List", "items": [SECRET]})
    assert "cGw0bnRlZA==" not in out and "bytes, value hidden" in out


def test_output_that_is_not_json_is_withheld() -> None:
    plan = output_plan("kubectl get cm -o jsonpath={.data}".split())
    assert "withheld" in render_output(plan, f"password {PLANTED}\n{{")


@pytest.mark.parametrize(
    "command",
    [
        "kubectl get cm -o templatefile=/etc/passwd",
        "kubectl get cm -o go-template-file=/etc/passwd",
        "kubectl get cm -o jsonpath-file=/etc/passwd",
        "kubectl get cm -o custom-columns-file=/etc/passwd",
        "kubectl get cm -o go-template={{.data}}",
        "kubectl get cm -o template={{.data}}",
        "kubectl get cm --template={{.data}}",
        "kubectl get cm --template {{.data}}",
        "kubectl get cm -ogo-template={{.x}}",
        "kubectl get cm -Ao=templatefile=/x",
        "kubectl get cm --output=go-template --template={{.x}}",
        "kubectl get cm -o unknown-format",
    ],
)
def test_formats_kubectl_would_render_itself_are_refused(command: str) -> None:
    with pytest.raises(KubectlOutputRefused):
        output_plan(command.split())
    _, verdict = evaluate_text(command)
    assert verdict.forbidden, verdict  # never runs, not even approved


@pytest.mark.parametrize(
    ("command", "argv", "wide", "everywhere", "labels"),
    [
        ("kubectl get pods", ["get", "pods"], False, False, ()),
        ("kubectl get pods -o wide --show-labels", ["get", "pods"], True, False, ()),
        ("kubectl get po -Ao wide -L app,tier --no-headers", ["get", "po", "-A"], True, True, ("app", "tier")),
        ("kubectl get po --all-namespaces -Lapp --show-kind", ["get", "po", "--all-namespaces"], False, True, ("app",)),
    ],
)
def test_tables_are_listed_as_json_and_printed_here(
    command: str, argv: list[str], wide: bool, everywhere: bool, labels: tuple[str, ...]
) -> None:
    plan = output_plan(command.split())
    assert plan is not None and plan.format == "table" and plan.table is not None
    assert plan.argv == ["kubectl", *argv, "-o", "json"]
    assert (plan.table.wide, plan.table.all_namespaces, plan.table.label_columns) == (wide, everywhere, labels)
    assert plan.headers == ("--no-headers" not in command)


@pytest.mark.parametrize(
    "command",
    [
        "kubectl get pods -o name",
        "kubectl logs web",
        "kubectl explain pods --output=plaintext-openapiv2",
        "kubectl get pods -o yaml -o name",
    ],
)
def test_tables_names_and_text_are_printed_by_kubectl(command: str) -> None:
    assert output_plan(command.split()) is None


def test_the_rewrite_keeps_the_other_flags() -> None:
    plan = output_plan(
        ["kubectl", "get", "pods", "-Ao", "yaml", "-n", "-o", "--sort-by", ".metadata.name", "-l", "a=b"]
    )
    assert plan.argv == [
        "kubectl",
        "get",
        "pods",
        "-A",
        "-n",
        "-o",
        "--sort-by",
        ".metadata.name",
        "-l",
        "a=b",
        "-o",
        "json",
    ]
    assert plan.format == "yaml"


def test_jsonpath_dialect() -> None:
    obj = {
        "items": [
            {"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}, "n": 3},
            {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}, "n": 1},
        ]
    }
    template = (
        '{range .items[?(@.n > 2)]}{.metadata.name}{"\\t"}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'
    )
    assert render_jsonpath(template, obj) == "a\tTrue\n"
    assert render_jsonpath("{.items[-1:].metadata.name}", obj) == "b"
    assert render_jsonpath("{.items[*]['n']}", obj) == "3 1"
    assert render_jsonpath("{.missing.key}", obj) == ""
    assert render_custom_columns("N:.metadata.name", obj, headers=False) == "a\nb\n"
    with pytest.raises(JsonPathError):
        render_jsonpath("{range .items[*]}{.x}", obj)
