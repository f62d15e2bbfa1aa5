"""A CRD change that adds a field keeps the objects stored under the old schema valid, on the real
apiserver: the examples users apply are stored, the CRD is replaced by one with a new optional
(defaulted) spec field and a new status field, and the old objects are read, listed, updated
(metadata, spec, status) and appended to (the Conversation's CEL transition rule) as before.

The control: the same change with the new field *required* breaks every update of an old
object with an error naming the field, which is why new fields must be optional (README,
"Upgrading").

Each test uses the real CRDs (crds/) under a group of its own, so the session's CRDs and the
operators other tests run are never touched.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until

REPO = Path(__file__).resolve().parents[2]
VERSION = "v1alpha1"


def example(kind: str) -> dict[str, Any]:
    docs = [
        d
        for f in ("crashloop.yaml", "conversation.yaml")
        for d in yaml.safe_load_all((REPO / "examples" / f).read_text())
        if d
    ]
    return next(d for d in docs if d["kind"] == kind)


def crd_in_group(name: str, group: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / f"{name}.yaml").read_text())
    crd["spec"]["group"] = group
    crd["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{group}"}
    return crd


def with_new_fields(crd: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    """The next version of `crd`: spec.escalationPolicy (defaulted) and status.escalatedAt."""
    new = copy.deepcopy(crd)
    schema = new["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    field: dict[str, Any] = {"type": "string", "enum": ["none", "page"], "description": "added in the next version"}
    if required:
        spec["required"] = [*spec.get("required", []), "escalationPolicy"]
    else:
        field["default"] = "none"
    spec["properties"]["escalationPolicy"] = field
    schema["properties"]["status"]["properties"]["escalatedAt"] = {"type": "string", "format": "date-time"}
    return new


class Crd:
    """One CRD of a test group: apply versions of it, and use its objects."""

    def __init__(self, api_client: k8s.ApiClient, crd: dict[str, Any]) -> None:
        self.ext = k8s.ApiextensionsV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.crd = crd
        self.group, self.plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]

    def apply(self, crd: dict[str, Any]) -> None:
        name = crd["metadata"]["name"]
        try:
            current = self.ext.read_custom_resource_definition(name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            self.ext.create_custom_resource_definition(crd)
        else:
            self.ext.replace_custom_resource_definition(
                name, {**crd, "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version}}
            )
        wait_until(
            f"{name} Established",
            lambda: any(
                c.type == "Established" and c.status == "True"
                for c in (self.ext.read_custom_resource_definition(name).status.conditions or [])
            ),
            60,
        )

    def create(self, namespace: str, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        obj = {**copy.deepcopy(obj), "apiVersion": f"{self.group}/{VERSION}"}
        obj["metadata"] = {"name": obj["metadata"]["name"], "namespace": namespace}
        extra = {"dry_run": "All"} if dry_run else {}
        return self.custom.create_namespaced_custom_object(self.group, VERSION, namespace, self.plural, obj, **extra)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(self.group, VERSION, namespace, self.plural, name)

    def patch(
        self,
        namespace: str,
        name: str,
        body: Any,
        *,
        status: bool = False,
        content_type: str = "application/merge-patch+json",
    ) -> dict[str, Any]:
        call = (
            self.custom.patch_namespaced_custom_object_status if status else self.custom.patch_namespaced_custom_object
        )
        return call(self.group, VERSION, namespace, self.plural, name, body, _content_type=content_type)

    def delete(self) -> None:
        self.ext.delete_custom_resource_definition(self.crd["metadata"]["name"])


@pytest.fixture
def stored(api_client: k8s.ApiClient, namespace: str) -> Iterator[dict[str, tuple[Crd, dict[str, Any]]]]:
    """The examples' Investigation and Conversation, stored under today's CRDs (a test group),
    with a status written as the operator writes it."""
    group = f"u{uuid.uuid4().hex[:8]}.lestrade.dev"
    made: dict[str, tuple[Crd, dict[str, Any]]] = {}
    try:
        for name, kind in (("investigation", "Investigation"), ("conversation", "Conversation")):
            crd = Crd(api_client, crd_in_group(name, group))
            crd.apply(crd.crd)
            obj = crd.create(namespace, example(kind))
            crd.patch(namespace, obj["metadata"]["name"], {"status": {"phase": "Running"}}, status=True)
            made[kind] = (crd, obj)
        yield made
    finally:
        for crd, _ in made.values():
            crd.delete()


def test_a_new_optional_field_keeps_old_objects_valid(
    stored: dict[str, tuple[Crd, dict[str, Any]]], namespace: str
) -> None:
    for kind, (crd, old) in stored.items():
        name = old["metadata"]["name"]
        crd.apply(with_new_fields(crd.crd))
        # The new schema is in effect once a new field survives pruning in a dry-run create.
        probe = {"metadata": {"name": "probe"}, "kind": kind, "spec": {**old["spec"], "escalationPolicy": "page"}}
        wait_until(
            "the new schema",
            lambda: crd.create(namespace, probe, dry_run=True)["spec"].get("escalationPolicy") == "page",
            30,
        )

        read = crd.get(namespace, name)
        assert read["spec"]["escalationPolicy"] == "none", kind  # the default, applied on read
        assert {k: v for k, v in read["spec"].items() if k != "escalationPolicy"} == old["spec"], kind
        assert read["status"]["phase"] == "Running", kind
        listed = crd.custom.list_namespaced_custom_object(crd.group, VERSION, namespace, crd.plural)["items"]
        assert [o["metadata"]["name"] for o in listed] == [name], kind

        # Old objects stay writable: metadata, status (old and new fields), and spec.
        crd.patch(namespace, name, {"metadata": {"labels": {"upgraded": "yes"}}})
        if kind == "Conversation":  # append a turn: the CEL transition rule still judges old turns
            crd.patch(
                namespace,
                name,
                [{"op": "add", "path": "/spec/turns/-", "value": {"ask": "And now?"}}],
                content_type="application/json-patch+json",
            )
            assert [t["ask"] for t in crd.get(namespace, name)["spec"]["turns"]][-1] == "And now?"
        else:  # a decision is still accepted; the CEL rule still freezes the rest of the spec
            crd.patch(namespace, name, {"spec": {"decisions": {"call-1": {"approved": True}}}})
            assert crd.get(namespace, name)["spec"]["decisions"] == {"call-1": {"approved": True}}
            with pytest.raises(k8s.ApiException) as refused:
                crd.patch(namespace, name, {"spec": {"description": "edited after the upgrade"}})
            assert refused.value.status == 422 and "spec is immutable once the investigation is Running" in str(
                refused.value.body
            )
        final = "Answered" if kind == "Conversation" else "Succeeded"
        status = crd.patch(
            namespace, name, {"status": {"phase": final, "escalatedAt": "2026-01-01T00:00:00Z"}}, status=True
        )
        assert status["status"]["escalatedAt"] == "2026-01-01T00:00:00Z"
        assert crd.get(namespace, name)["metadata"]["labels"] == {"upgraded": "yes"}


def test_a_new_required_field_would_break_old_objects(
    stored: dict[str, tuple[Crd, dict[str, Any]]], namespace: str
) -> None:
    crd, old = stored["Investigation"]
    name = old["metadata"]["name"]
    crd.apply(with_new_fields(crd.crd, required=True))

    def refused() -> str | None:
        try:
            crd.patch(namespace, name, {"metadata": {"labels": {"upgraded": uuid.uuid4().hex[:6]}}})
        except k8s.ApiException as exc:
            return str(exc.body) if exc.status == 422 else None
        return None

    wait_until("updates of the old object to be refused", lambda: refused() is not None, 30)
    assert "spec.escalationPolicy: Required value" in str(refused())
    assert crd.get(namespace, name)["spec"]["title"] == old["spec"]["title"]  # still readable
