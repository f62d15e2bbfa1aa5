"""Puts a scenario's broken cluster state onto the local control plane, in its own namespace.

Objects are created as written, with three simulation seams of the local cluster:
- a Pod's `status` (as `kubectl get -o yaml` shows it) moves into the `lestrade.dev/status`
  annotation, which KWOK's `lestrade-pod-status` stage turns back into the Pod's status once
  the scheduler has placed it (a kubelet would write it there);
- any other object's `status` is written through its status subresource after creation (HPAs:
  the local cluster has no metrics API, so no controller writes theirs);
- every pod gets the toleration simulated nodes need, unless the scenario is about taints.
Logs are served by KWOK `Logs` objects (files of any size); Events are created as the kubelet
or a controller would have; cluster-scoped objects (nodes) are removed by `unstage`.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from lestrade.evals.scenario import EventSpec, GeneratedLines, LogSpec, Scenario
from lestrade.localcluster.processes import wait_until
from lestrade.localcluster.simlogs import as_cri_log
from lestrade.resources.keys import EVAL_LABEL, SIMULATE_ANNOTATION
from lestrade.resources.keys import PREFIX as KEY_PREFIX
from lestrade.resources.keys import SIMULATED_STATUS_ANNOTATION as STATUS_ANNOTATION

__all__ = ["STATUS_ANNOTATION", "EVAL_LABEL", "prepare", "render_lines", "Stager"]

_KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists"}
_TEMPLATED = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def render_lines(spec: str | GeneratedLines) -> str:
    """A log text, or the generated one (filler templates cycled, key lines at their numbers)."""
    if isinstance(spec, str):
        return spec
    out = []
    for n in range(1, spec.lines + 1):
        out.append(spec.insert.get(n) or spec.filler[(n - 1) % len(spec.filler)].replace("{n}", str(n)))
    return "\n".join(out) + "\n"


def _pod_spec_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind == "Pod":
        return doc.setdefault("spec", {})
    if kind in _TEMPLATED:
        return doc.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"].setdefault("spec", {})
    return None


def prepare(doc: dict[str, Any], scenario: Scenario) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the object to create, the status to write afterwards through the status subresource)."""
    doc = copy.deepcopy(doc)
    meta = doc.setdefault("metadata", {})
    status = doc.pop("status", None)
    pod_spec = _pod_spec_of(doc)
    if pod_spec is not None and scenario.tolerate_kwok:
        tolerations = pod_spec.setdefault("tolerations", [])
        if _KWOK_TOLERATION not in tolerations:
            tolerations.append(dict(_KWOK_TOLERATION))
    if doc.get("kind") == "Pod" and status:
        annotations = meta.setdefault("annotations", {})
        annotations[SIMULATE_ANNOTATION] = "status"
        annotations[STATUS_ANNOTATION] = yaml.safe_dump(status, sort_keys=False)
        status = None
    return doc, status


class Stager:
    """Creates and removes scenarios' objects with one dynamic client (discovery done once)."""

    def __init__(self, api_client: k8s.ApiClient, logs_dir: Path) -> None:
        self.api_client = api_client
        self.dynamic = DynamicClient(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self.logs_dir = logs_dir
        logs_dir.mkdir(parents=True, exist_ok=True)
        self._served: dict[str, set[str]] = {}
        self._cluster_events: dict[str, list[tuple[str, str]]] = {}

    def _resource(self, doc: dict[str, Any]) -> Any:
        return self.dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])

    def create(self, doc: dict[str, Any], namespace: str | None, status: dict[str, Any] | None) -> dict[str, Any]:
        """Creates `doc`; a second document of the same object is an update (a rollout), made
        once the object's controller has acted on the first (so both revisions exist)."""
        res = self._resource(doc)
        ns = namespace if res.namespaced else None
        try:
            created = res.create(body=doc, namespace=ns).to_dict()
        except ConflictError:
            name = doc["metadata"]["name"]

            def observed() -> bool:
                current = res.get(name=name, namespace=ns).to_dict()
                generation = current["metadata"].get("generation")
                return generation is None or (current.get("status") or {}).get("observedGeneration", 0) >= generation

            wait_until(
                f"the controller of {doc['kind']} {name} to act on its first version",
                observed,
                timeout=60,
                interval=0.5,
            )
            created = res.patch(
                body=doc, name=name, namespace=ns, content_type="application/merge-patch+json"
            ).to_dict()
        if status:  # a merge patch: a controller (KWOK for nodes) may have written status since
            res.status.patch(
                body={"status": status},
                name=doc["metadata"]["name"],
                namespace=ns,
                content_type="application/merge-patch+json",
            )
        return created

    def stage(self, scenario: Scenario) -> None:
        """Creates the namespace, the objects, logs, Events (blocking; run it in a thread)."""
        ns = scenario.namespace
        self.core.create_namespace(
            k8s.V1Namespace(
                metadata=k8s.V1ObjectMeta(name=ns, labels={**scenario.namespace_labels, EVAL_LABEL: "true"})
            )
        )
        for raw in scenario.cluster_objects:
            doc, status = prepare(raw, scenario)
            self._replace_cluster_object(doc, status)
        for raw in scenario.manifests:
            doc, status = prepare(raw, scenario)
            self.create(doc, ns, status)
        self.serve_logs(scenario)
        self._settle(ns)
        events = [e for spec in scenario.events for e in self._events(ns, spec)]
        if events:
            with ThreadPoolExecutor(4) as pool:
                created = list(pool.map(lambda e: self.core.create_namespaced_event(e.metadata.namespace, e), events))
            # a node's Events live in `default` (as the kubelet posts them): removed by unstage
            self._cluster_events[ns] = [
                (e.metadata.namespace, e.metadata.name) for e in created if e.metadata.namespace != ns
            ]

    def _replace_cluster_object(self, doc: dict[str, Any], status: dict[str, Any] | None) -> None:
        res = self._resource(doc)
        try:
            res.delete(name=doc["metadata"]["name"])
        except NotFoundError:
            pass
        self.create(doc, None, status)

    def serve_logs(self, scenario: Scenario) -> None:
        """Logs for the named pods, and for the pods a selector matches now (a controller may
        add more later: called again until the scenario's evidence is visible)."""
        ns = scenario.namespace
        served = self._served.setdefault(ns, set())
        for spec in scenario.logs:
            if spec.pod:
                pods = [spec.pod]
            else:
                pods = [p.metadata.name for p in self.core.list_namespaced_pod(ns, label_selector=spec.selector).items]
            for pod in pods:
                key = f"{pod}/{spec.container or ''}"
                if key not in served:
                    self._serve_logs(ns, pod, spec)
                    served.add(key)

    def _settle(self, namespace: str) -> None:
        """Once KWOK gave every simulated pod its status (it has an IP then), the annotations that
        recorded it go: the tools must show the status as a kubelet reports it, not the script
        (`lestrade.dev/simulate` stays: it keeps KWOK's own stages off the pod)."""

        def simulated() -> list[k8s.V1Pod]:
            return [
                p
                for p in self.core.list_namespaced_pod(namespace).items
                if SIMULATE_ANNOTATION in (p.metadata.annotations or {})
            ]

        wait_until(
            f"simulated pods of {namespace} to get their status",
            lambda: all(p.status.pod_ip for p in simulated()),
            timeout=60,
            interval=0.5,
        )
        for pod in simulated():
            patch = [
                {"op": "remove", "path": "/metadata/annotations/" + key.replace("/", "~1")}
                for key in pod.metadata.annotations or {}
                if key.startswith(KEY_PREFIX) and key != SIMULATE_ANNOTATION
            ]
            if patch:
                self.core.patch_namespaced_pod(pod.metadata.name, namespace, patch)

    def _serve_logs(self, namespace: str, pod: str, spec: LogSpec) -> None:
        base = self.logs_dir / f"{namespace}_{pod}_{spec.container or 'all'}"
        entry: dict[str, Any] = {"follow": False}
        current = base.with_suffix(".log")
        current.write_text(as_cri_log(render_lines(spec.current)))
        entry["logsFile"] = str(current)
        if spec.previous is not None:
            previous = base.with_suffix(".previous.log")
            previous.write_text(as_cri_log(render_lines(spec.previous)))
            entry["previousLogsFile"] = str(previous)
        if spec.container:
            entry["containers"] = [spec.container]
        self._create_logs(namespace, pod, entry)

    def _create_logs(self, namespace: str, pod: str, entry: dict[str, Any]) -> None:
        custom = k8s.CustomObjectsApi(self.api_client)
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": [entry]},
        }
        try:
            custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", body)
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
            # a second container of the same pod: one Logs object holds every container's entry
            current = custom.get_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", pod)
            current["spec"]["logs"].append(entry)
            custom.replace_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", pod, current)

    def _events(self, namespace: str, spec: EventSpec) -> list[k8s.CoreV1Event]:
        kind, name = spec.object.split("/")
        doc = {"apiVersion": _API_VERSIONS.get(kind.lower(), "v1"), "kind": _KINDS.get(kind.lower(), kind)}
        res = self._resource(doc)
        obj = res.get(name=name, namespace=namespace if res.namespaced else None).to_dict()
        ref = k8s.V1ObjectReference(
            kind=doc["kind"],
            name=name,
            namespace=obj["metadata"].get("namespace"),
            uid=obj["metadata"]["uid"],
            api_version=doc["apiVersion"],
        )
        where = namespace if res.namespaced else "default"
        now = datetime.now(UTC)
        events = []
        for n in range(1, spec.repeat + 1):
            last = now - timedelta(minutes=spec.age_minutes, seconds=spec.repeat - n)
            events.append(
                k8s.CoreV1Event(
                    metadata=k8s.V1ObjectMeta(generate_name=f"{name}.", namespace=where),
                    involved_object=ref,
                    reason=spec.reason,
                    message=spec.message.replace("{n}", str(n)),
                    type=spec.type,
                    count=spec.count,
                    first_timestamp=last - timedelta(minutes=5 * (spec.count > 1)),
                    last_timestamp=last,
                    source=k8s.V1EventSource(component=spec.component),
                )
            )
        return events

    def unstage(self, scenario: Scenario) -> None:
        """Deletes the namespace (in the background) and the cluster-scoped objects."""
        try:
            self.core.delete_namespace(scenario.namespace, propagation_policy="Background")
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
        for raw in scenario.cluster_objects:
            try:
                self._resource(raw).delete(name=raw["metadata"]["name"])
            except NotFoundError:
                pass
        for namespace, name in self._cluster_events.pop(scenario.namespace, []):
            try:
                self.core.delete_namespaced_event(name, namespace)
            except k8s.ApiException as exc:
                if exc.status != 404:
                    raise


_KINDS = {
    "pod": "Pod",
    "deployment": "Deployment",
    "deploy": "Deployment",
    "node": "Node",
    "service": "Service",
    "svc": "Service",
    "replicaset": "ReplicaSet",
    "statefulset": "StatefulSet",
    "pvc": "PersistentVolumeClaim",
    "persistentvolumeclaim": "PersistentVolumeClaim",
    "hpa": "HorizontalPodAutoscaler",
    "horizontalpodautoscaler": "HorizontalPodAutoscaler",
    "job": "Job",
    "cronjob": "CronJob",
    "ingress": "Ingress",
    "daemonset": "DaemonSet",
    "configmap": "ConfigMap",
}
_API_VERSIONS = {
    "deployment": "apps/v1",
    "deploy": "apps/v1",
    "replicaset": "apps/v1",
    "statefulset": "apps/v1",
    "daemonset": "apps/v1",
    "hpa": "autoscaling/v2",
    "horizontalpodautoscaler": "autoscaling/v2",
    "job": "batch/v1",
    "cronjob": "batch/v1",
    "ingress": "networking.k8s.io/v1",
}
