"""Helpers for the Alertmanager receiver tests: API processes, payloads, routes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s

from lestrade.localcluster.cluster import free_port
from lestrade.localcluster.processes import wait_until
from lestrade.resources.rest import request_json

__all__ = ["api_processes", "alert", "payload", "apply_route", "route_status", "routed_investigations", "STARTS_AT"]

STARTS_AT = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


@contextmanager
def api_processes(
    kubeconfig: Path, namespace: str, key_dir: Path, count: int = 2, env: dict[str, str] | None = None
) -> Iterator[list[str]]:
    """`count` separate `python -m lestrade.api` processes serving `namespace`, authentication
    on, accepting the API key in `key_dir`; yields their base URLs."""
    extra = env
    procs: list[subprocess.Popen[bytes]] = []
    bases: list[str] = []
    try:
        for _ in range(count):
            port = free_port()
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "LESTRADE_NAMESPACE": namespace,
                "LESTRADE_API_HOST": "127.0.0.1",
                "LESTRADE_API_PORT": str(port),
                "LESTRADE_API_AUTH": "true",
                "LESTRADE_API_KEYS_DIR": str(key_dir),
                **(extra or {}),
            }
            env.pop("KUBERNETES_SERVICE_HOST", None)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "lestrade.api"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            bases.append(f"http://127.0.0.1:{port}")
        for proc, base in zip(procs, bases):

            def ready(base: str = base, proc: subprocess.Popen[bytes] = proc) -> bool:
                assert proc.poll() is None, f"the API process at {base} exited with {proc.returncode}"
                try:
                    return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(f"API {base} ready", ready, 180)  # a loaded 2-core machine: imports take a while
        yield bases
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def alert(
    i: int,
    namespace: str,
    *,
    alertname: str = "KubePodCrashLooping",
    severity: str = "warning",
    status: str = "firing",
    **labels: str,
) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {
            "alertname": alertname,
            "severity": severity,
            "namespace": namespace,
            "pod": f"web-{i}",
            "container": "app",
            **labels,
        },
        "annotations": {"description": f"Pod web-{i} is restarting", "summary": "crash loop"},
        "startsAt": STARTS_AT.isoformat().replace("+00:00", "Z"),
        "endsAt": "2026-11-23T04:00:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": f"{i:016x}",
    }


def payload(alerts: list[dict[str, Any]], status: str = "firing") -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="x"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "lestrade",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": alerts,
    }


def _base(namespace: str, plural: str) -> str:
    return f"/apis/lestrade.dev/v1alpha1/namespaces/{namespace}/{plural}"


def apply_route(api_client: k8s.ApiClient, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "lestrade.dev/v1alpha1",
        "kind": "AlertRoute",
        "metadata": {"name": name},
        "spec": {"investigation": {"title": "{{ labels.alertname }} on {{ labels.pod }}"}, **spec},
    }
    return request_json(api_client, "POST", _base(namespace, "alertroutes"), body)


def route_status(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return request_json(api_client, "GET", f"{_base(namespace, 'alertroutes')}/{name}").get("status") or {}


def routed_investigations(api_client: k8s.ApiClient, namespace: str, route: str) -> dict[str, dict[str, Any]]:
    listing = request_json(
        api_client,
        "GET",
        _base(namespace, "investigations"),
        query={"labelSelector": f"lestrade.dev/alert-route={route}"},
    )
    return {item["metadata"]["name"]: item for item in listing["items"]}
