"""The generated CRDs are current, structural, and described for `kubectl explain`."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lestrade.resources import crd_manifests
from lestrade.resources.crd import DEFINITIONS
from lestrade.resources.generate import OUTPUT_DIRS, REPO_ROOT, expected_files, main, stale_files
from lestrade.resources.investigation import MUTABLE_SPEC_FIELDS, InvestigationSpec
from lestrade.resources.schema import SchemaError, structural_schema

FORBIDDEN = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "const"}


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}{{}}")


def _schema(kind: str) -> dict[str, Any]:
    crd = next(c for c in crd_manifests() if c["spec"]["names"]["kind"] == kind)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_files_are_current() -> None:
    stale = stale_files()
    assert not stale, f"regenerate with `python -m lestrade.resources.generate`: {stale}"


def test_committed_files_load_as_the_manifests() -> None:
    for definition, manifest in zip(DEFINITIONS, crd_manifests(), strict=True):
        for folder in OUTPUT_DIRS:
            on_disk = yaml.safe_load((REPO_ROOT / folder / definition.file_name).read_text())
            assert on_disk == manifest


def test_check_reports_stale_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0
    edited = tmp_path / "crds" / "investigation.yaml"
    edited.write_text(edited.read_text().replace("maxLength: 1024", "maxLength: 9"))
    (tmp_path / "charts" / "lestrade" / "crds" / "conversation.yaml").unlink()
    capsys.readouterr()
    assert main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "crds/investigation.yaml" in err
    assert "charts/lestrade/crds/conversation.yaml" in err
    assert "charts/lestrade/crds/investigation.yaml" not in err
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0


def test_generator_writes_identical_files_into_crds_and_chart(tmp_path: Path) -> None:
    shutil.rmtree(tmp_path, ignore_errors=True)
    main(["--root", str(tmp_path)])
    for path, text in expected_files(tmp_path).items():
        assert path.read_text() == text
    assert (tmp_path / "crds" / "investigation.yaml").read_text() == (
        tmp_path / "charts" / "lestrade" / "crds" / "investigation.yaml"
    ).read_text()


@pytest.mark.parametrize("kind", ["Investigation", "Conversation"])
def test_schema_is_structural_and_described(kind: str) -> None:
    for path, node in _nodes(_schema(kind)):
        assert not FORBIDDEN & node.keys(), f"{kind}{path} has {FORBIDDEN & node.keys()}"
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), f"{kind}{path} has no type"
        assert node.get("additionalProperties", {}) is not True
        assert "exclusiveMinimum" not in node or node["exclusiveMinimum"] is True
    for path, node in _nodes(_schema(kind)):
        for name, sub in node.get("properties", {}).items():
            if path == "" and name == "metadata":
                continue  # ObjectMeta: described by the apiserver, which forbids a description
            assert sub.get("description"), f"{kind}{path}.{name} has no description"


def test_free_form_objects_preserve_unknown_fields() -> None:
    spec = _schema("Investigation")["properties"]["spec"]["properties"]
    for name in ("subject", "context"):
        assert spec[name] == {
            "type": "object",
            "description": spec[name]["description"],
            "x-kubernetes-preserve-unknown-fields": True,
        }
    status = _schema("Investigation")["properties"]["status"]["properties"]
    params = status["toolCalls"]["items"]["properties"]["params"]
    assert params["x-kubernetes-preserve-unknown-fields"] is True


def test_defaults_enums_and_bounds_reach_the_schema() -> None:
    inv = _schema("Investigation")["properties"]
    spec = inv["spec"]
    assert spec["required"] == ["title"]
    assert spec["properties"]["source"]["default"] == "kubernetes"
    assert spec["properties"]["enableToolApproval"]["default"] is True
    assert spec["properties"]["maxSteps"]["minimum"] == 1
    assert spec["properties"]["maxSteps"]["maximum"] == 100
    assert "pattern" in spec["properties"]["timeout"]
    decision = spec["properties"]["decisions"]["additionalProperties"]
    assert decision["required"] == ["approved"]
    assert inv["status"]["properties"]["phase"]["enum"] == [
        "Pending",
        "Running",
        "AwaitingApproval",
        "Succeeded",
        "Failed",
    ]
    ctx = _schema("Conversation")["properties"]["spec"]["properties"]["context"]["properties"]
    assert ctx["triggerRatio"] == {
        "type": "number",
        "description": ctx["triggerRatio"]["description"],
        "default": 0.7,
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
    }
    assert ctx["compaction"]["properties"]["policy"]["enum"] == ["last_n", "skip_parts", "manual"]


def test_every_spec_field_but_decisions_is_frozen_by_the_root_rule() -> None:
    rule = _schema("Investigation")["x-kubernetes-validations"][0]["rule"]
    for field in InvestigationSpec.model_fields.values():
        frozen = f"self.spec.{field.alias} == oldSelf.spec.{field.alias}" in rule
        assert frozen == (field.alias not in MUTABLE_SPEC_FIELDS), field.alias


def test_resource_names_columns_and_subresources() -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in crd_manifests()}
    inv, conv = by_kind["Investigation"], by_kind["Conversation"]
    assert inv["metadata"]["name"] == "investigations.lestrade.dev"
    assert conv["metadata"]["name"] == "conversations.lestrade.dev"
    for crd, short in ((inv, "inv"), (conv, "conv")):
        assert crd["spec"]["scope"] == "Namespaced"
        assert crd["spec"]["names"]["shortNames"] == [short]
        assert crd["spec"]["names"]["categories"] == ["lestrade"]
        version = crd["spec"]["versions"][0]
        assert version["name"] == "v1alpha1"
        assert version["subresources"] == {"status": {}}
    columns = lambda crd: [  # noqa: E731
        c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"] if not c.get("priority")
    ]
    assert columns(inv) == ["Phase", "Steps", "Tools", "Tokens", "Age"]
    assert columns(conv) == ["Phase", "Asked", "Answered", "Version", "Tokens", "Age"]


def test_printer_columns_point_at_real_fields() -> None:
    for crd in crd_manifests():
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        for column in version["additionalPrinterColumns"]:
            if column["jsonPath"].startswith(".metadata."):
                continue
            node = schema
            # `.status.conditions[?(@.type=="Ready")].reason`: a filter selects an item of a list
            path = re.sub(r"\[\?\(@\.[^)]*\)\]", "[]", column["jsonPath"])
            for part in path.strip(".").split("."):
                node = node["properties"][part.removesuffix("[]")]
                if part.endswith("[]"):
                    assert node["type"] == "array", column
                    node = node["items"]
            expected = {"integer": "integer", "string": "string", "date": "string", "boolean": "boolean"}[
                column["type"]
            ]
            assert node["type"] == expected, column


def test_unions_are_refused() -> None:
    from pydantic import BaseModel, Field

    class Bad(BaseModel):
        value: int | str = Field(description="either")

    with pytest.raises(SchemaError, match="unions"):
        structural_schema(Bad)
