"""kubeconform (built from Go modules like the other binaries) on everything the chart
renders, in strict mode, against the JSON schemas of the real kube-apiserver's OpenAPI v3 (the
control plane this project builds; no network): no finding, and every kind it skips is
explained in kubeconform.yaml."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_chart_hardening import EVERYTHING_ON, VARIANTS, apply_peering_crds, kubectl, render

from lestrade.localcluster import binary_path, ensure_binaries
from lestrade.localcluster.processes import wait_until

pytestmark = pytest.mark.binaries("helm", "kubeconform")

CONFIG = Path(__file__).with_name("kubeconform.yaml")
INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}


def _jsonschema(node: Any) -> Any:
    """OpenAPI v3 (Kubernetes flavour) → JSON schema for kubeconform: int-or-string becomes a
    oneOf, and objects with declared properties reject unknown ones (strict). Walks schema
    nodes only: a `properties` map's keys are field names (JSONSchemaProps has fields called
    `properties` and `x-kubernetes-int-or-string`)."""
    if not isinstance(node, dict):
        return node
    if node.get("x-kubernetes-int-or-string") is True or node.get("format") == "int-or-string":
        return {**INT_OR_STRING, "description": node.get("description", "")}
    out = dict(node)
    for key in ("properties", "patternProperties"):
        if isinstance(node.get(key), dict):
            out[key] = {name: _jsonschema(child) for name, child in node[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            out[key] = _jsonschema(node[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            out[key] = [_jsonschema(child) for child in node[key]]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def write_schemas(cluster: Any, docs: list[dict[str, Any]], folder: Path) -> None:
    """One schema file per kind the documents use, at kubeconform's
    `{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json`."""
    skipped = {s["kind"] for s in yaml.safe_load(CONFIG.read_text())["skip"]}
    wanted = {d["apiVersion"] for d in docs if d["kind"] not in skipped}

    def key(api_version: str) -> str:
        return f"apis/{api_version}" if "/" in api_version else f"api/{api_version}"

    index: dict[str, Any] = {}

    def published() -> bool:
        # A CRD's group appears in the OpenAPI index a moment after it is Established.
        index.update(json.loads(kubectl(cluster, "get", "--raw", "/openapi/v3").stdout)["paths"])
        return all(key(v) in index for v in wanted)

    wait_until("the apiserver to publish every group's OpenAPI", published, 60)
    for api_version in sorted(wanted):
        group, _, version = api_version.rpartition("/")
        raw = kubectl(cluster, "get", "--raw", index[key(api_version)]["serverRelativeURL"])
        assert raw.returncode == 0, raw.stderr
        schemas = {
            name: _jsonschema(schema) for name, schema in json.loads(raw.stdout)["components"]["schemas"].items()
        }
        for kind in {d["kind"] for d in docs if d["apiVersion"] == api_version}:
            names = [
                n
                for n, s in schemas.items()
                for gvk in s.get("x-kubernetes-group-version-kind", [])
                if (gvk["group"], gvk["version"], gvk["kind"]) == (group, version, kind)
            ]
            if not names:
                continue  # no schema served: kubeconform reports it unless the kind is skipped
            target = folder / (group or version) / version / f"{kind.lower()}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                json.dumps({"$ref": f"#/components/schemas/{names[0]}", "components": {"schemas": schemas}})
            )


def test_every_skip_is_explained() -> None:
    skips = yaml.safe_load(CONFIG.read_text())["skip"]
    assert skips and all(s["kind"] and len(s["why"]) > 40 for s in skips)
    rendered = {d["kind"] for values in VARIANTS.values() for d in render(values)}
    assert {s["kind"] for s in skips} <= rendered, "a skip for a kind the chart does not render"


def test_kubeconform_finds_nothing(cluster: Any, crds: None, tmp_path: Path) -> None:
    ensure_binaries(["kubeconform"], quiet=True)
    docs = [d for values in VARIANTS.values() for d in render(values)]
    apply_peering_crds(cluster, render(EVERYTHING_ON))  # their schemas are served once installed
    write_schemas(cluster, docs, tmp_path / "schemas")
    skip = ",".join(s["kind"] for s in yaml.safe_load(CONFIG.read_text())["skip"])
    proc = subprocess.run(
        [
            str(binary_path("kubeconform")),
            "-strict",
            "-summary",
            "-output",
            "json",
            "-skip",
            skip,
            "-schema-location",
            str(tmp_path / "schemas") + "/{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json",
            "-",
        ],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(proc.stdout)
    problems = [r for r in report["resources"] if r["status"] not in ("statusValid", "statusSkipped")]
    assert proc.returncode == 0 and not problems, json.dumps(problems or report, indent=1)[:4000]
    summary = report["summary"]
    skipped = sum(1 for d in docs if d["kind"] in skip.split(","))
    assert summary["valid"] == len(docs) - skipped and summary["skipped"] == skipped, summary


def _wrong_type(deployment: dict[str, Any]) -> None:
    deployment["spec"]["replicas"] = "two"


def _misspelt_field(deployment: dict[str, Any]) -> None:
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}


@pytest.mark.parametrize(
    "breaks, finding",
    [(_wrong_type, "replicas"), (_misspelt_field, "securityContxt")],
    ids=["wrong-type", "misspelt-field"],
)
def test_kubeconform_reports_a_broken_manifest(
    cluster: Any, crds: None, tmp_path: Path, breaks: Any, finding: str
) -> None:
    """The linter really lints: a wrong type and a misspelt field are findings."""
    ensure_binaries(["kubeconform"], quiet=True)
    (deployment,) = [d for d in render({}) if d["kind"] == "Deployment"]
    breaks(deployment)
    write_schemas(cluster, [deployment], tmp_path / "schemas")
    proc = subprocess.run(
        [
            str(binary_path("kubeconform")),
            "-strict",
            "-output",
            "json",
            "-schema-location",
            str(tmp_path / "schemas") + "/{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json",
            "-",
        ],
        input=yaml.safe_dump(deployment),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert finding in proc.stdout, proc.stdout
