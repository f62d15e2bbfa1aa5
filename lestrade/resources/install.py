"""Install the CRDs into a cluster and wait until the apiserver serves them.

Used by `make run`, the test fixtures and the operator's startup. The manifests come straight
from the models (not from the YAML files), so a test run always exercises the current schema.
Waiting is event-driven: a watch on each CRD returns as soon as the apiserver reports it
Established, instead of polling with sleeps.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from lestrade.resources.crd import crd_manifests
from lestrade.resources.rest import request_json

__all__ = ["install_crds", "wait_established", "wait_admissible", "CrdNotEstablished"]


class CrdNotEstablished(TimeoutError):
    """A CRD did not become Established (names rejected, or the apiserver too slow)."""


_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _apply(api_client: client.ApiClient, manifest: dict[str, Any]) -> None:
    name = manifest["metadata"]["name"]
    try:
        request_json(api_client, "POST", _CRDS, manifest)
        return
    except ApiException as error:
        if error.status != 409:
            raise
    # Already there: replace it, carrying over the resourceVersion (optimistic concurrency).
    for _ in range(5):
        current = request_json(api_client, "GET", f"{_CRDS}/{name}")
        body = {**manifest, "metadata": {**manifest["metadata"]}}
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            request_json(api_client, "PUT", f"{_CRDS}/{name}", body)
            return
        except ApiException as error:
            if error.status != 409:
                raise
    raise RuntimeError(f"could not replace CRD {name}: kept conflicting with other writers")


def _established(crd: dict[str, Any]) -> bool:
    for cond in (crd.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "NamesAccepted" and cond.get("status") == "False":
            raise CrdNotEstablished(f"CRD {crd['metadata']['name']}: names not accepted: {cond.get('message')}")
        if cond.get("type") == "Established" and cond.get("status") == "True":
            return True
    return False


def wait_established(api_client: client.ApiClient, name: str, timeout: float = 60) -> None:
    """Block until CRD `name` has condition Established=True, or raise CrdNotEstablished."""
    api = client.ApiextensionsV1Api(api_client)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CrdNotEstablished(f"CRD {name} not Established after {timeout}s")
        listing = request_json(api_client, "GET", _CRDS, query={"fieldSelector": f"metadata.name={name}"})
        for item in listing.get("items", []):
            if _established(item):
                return
        stream = watch.Watch()
        try:
            for event in stream.stream(
                api.list_custom_resource_definition,
                field_selector=f"metadata.name={name}",
                resource_version=listing["metadata"]["resourceVersion"],
                timeout_seconds=max(1, int(remaining)),
                deserialize=False,
            ):
                obj = event["object"]
                if event["type"] != "DELETED" and _established(obj):
                    return
        finally:
            stream.stop()


_AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def _discovered(api_client: client.ApiClient, group: str, version: str, plural: str) -> set[str] | None:
    """The categories aggregated discovery lists for the resource, or None when it is absent."""
    listing = request_json(api_client, "GET", "/apis", accept=_AGGREGATED_DISCOVERY)
    for entry in listing.get("items", []):
        if entry.get("metadata", {}).get("name") != group:
            continue
        for served in entry.get("versions", []):
            if served.get("version") != version:
                continue
            for resource in served.get("resources", []):
                if resource.get("resource") == plural:
                    return set(resource.get("categories") or [])
    return None


def wait_discoverable(api_client: client.ApiClient, manifest: dict[str, Any], timeout: float) -> None:
    """Block until the apiserver's aggregated discovery lists the CRD with its categories.

    Established comes first; discovery follows asynchronously. kubectl reads aggregated
    discovery, so a `kubectl get lestrade` in that gap fails with "doesn't have a resource type".
    """
    spec = manifest["spec"]
    names = spec["names"]
    wanted = set(names.get("categories", []))
    deadline = time.monotonic() + timeout
    while True:
        found = _discovered(api_client, spec["group"], spec["versions"][0]["name"], names["plural"])
        if found is not None and wanted <= found:
            return
        if time.monotonic() > deadline:
            raise CrdNotEstablished(f"{names['plural']} not in API discovery after {timeout}s")
        time.sleep(0.1)


def wait_admissible(api_client: client.ApiClient, manifest: dict[str, Any], timeout: float) -> None:
    """Block until a (dry-run) create of the CRD's kind gets past admission.

    A MutatingAdmissionPolicy matching the kind (the requester policy) needs the kind's schema,
    which its type-converter manager loads some time after discovery serves it; a create in that
    gap is refused with 503 "Resource kind ... not found". Any other answer (422 for the empty
    probe object) means the policy could handle it."""
    spec = manifest["spec"]
    names = spec["names"]
    version = spec["versions"][0]["name"]
    where = "namespaces/default/" if spec.get("scope") == "Namespaced" else ""
    path = f"/apis/{spec['group']}/{version}/{where}{names['plural']}"
    probe = {
        "apiVersion": f"{spec['group']}/{version}",
        "kind": names["kind"],
        "metadata": {"generateName": "lestrade-admission-probe-"},
    }
    deadline = time.monotonic() + timeout
    while True:
        try:
            request_json(api_client, "POST", path, probe, query={"dryRun": "All"})
            return
        except ApiException as error:
            if error.status != 503:
                return
        if time.monotonic() > deadline:
            raise CrdNotEstablished(f"{names['plural']} still refused by admission (503) after {timeout}s")
        time.sleep(0.1)


def install_crds(api_client: client.ApiClient, wait: bool = True, timeout: float = 60) -> None:
    """Create or replace every Lestrade CRD; with `wait`, return once all are Established,
    served by API discovery (so kubectl finds them at once) and past admission policies."""
    manifests = crd_manifests()
    for manifest in manifests:
        _apply(api_client, manifest)
    if wait:
        deadline = time.monotonic() + timeout
        for manifest in manifests:
            wait_established(api_client, manifest["metadata"]["name"], max(1.0, deadline - time.monotonic()))
            wait_discoverable(api_client, manifest, max(1.0, deadline - time.monotonic()))
            wait_admissible(api_client, manifest, max(1.0, deadline - time.monotonic()))
