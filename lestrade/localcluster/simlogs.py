"""Container logs for simulated pods, declared in the pod's own annotations.

KWOK serves pod logs from files named by a `Logs` object, and files are machine-local, so an
example manifest cannot carry them. On the local control plane, a pod annotated with

    lestrade.dev/logs:          what `kubectl logs POD` shows
    lestrade.dev/previous-logs: what `kubectl logs POD --previous` shows

gets those files written into the cluster's data dir and a `Logs` object pointing at them, so
an example's crash-looping pod has the logs a real one would have.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from lestrade.resources.keys import LOGS_ANNOTATION, PREVIOUS_LOGS_ANNOTATION

__all__ = ["LogSimulator", "LOGS_ANNOTATION", "PREVIOUS_LOGS_ANNOTATION", "as_cri_log"]


log = logging.getLogger(__name__)


def as_cri_log(text: str) -> str:
    """The CRI log format the kubelet (and KWOK) reads: `<time> <stream> F <line>`."""
    lines = text.splitlines() or [""]
    return "".join(f"2026-01-01T00:00:{i % 60:02d}.000000000Z stdout F {line}\n" for i, line in enumerate(lines))


class LogSimulator:
    """Watches pods (all namespaces) and serves the logs their annotations declare."""

    def __init__(self, api_client: k8s.ApiClient, folder: Path) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._folder = folder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kwok-log-simulator", daemon=True)

    def start(self) -> LogSimulator:
        self._folder.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                stream = k8s_watch.Watch().stream(self._core.list_pod_for_all_namespaces, timeout_seconds=5)
                for event in stream:
                    if event["type"] == "ADDED":
                        self._serve(event["object"])
                    if self._stop.is_set():
                        return
            except Exception as exc:  # apiserver going away at shutdown, mostly
                if self._stop.wait(1):
                    return
                log.debug("log simulator watch restarted: %s", exc)

    def _serve(self, pod: k8s.V1Pod) -> None:
        annotations = pod.metadata.annotations or {}
        current, previous = annotations.get(LOGS_ANNOTATION), annotations.get(PREVIOUS_LOGS_ANNOTATION)
        if current is None and previous is None:
            return
        namespace, name = pod.metadata.namespace, pod.metadata.name
        entry: dict[str, object] = {"follow": False}
        for key, text, suffix in (("logsFile", current, "log"), ("previousLogsFile", previous, "previous.log")):
            path = self._folder / f"{namespace}_{name}.{suffix}"
            path.write_text(as_cri_log(text or ""))
            entry[key] = str(path)
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod.metadata.uid}],
            },
            "spec": {"logs": [entry]},
        }
        try:
            self._custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", body)
        except k8s.ApiException as exc:
            if exc.status != 409:
                log.warning("cannot serve simulated logs of %s/%s: %s", namespace, name, exc.reason)
