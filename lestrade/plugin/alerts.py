"""An alert (Alertmanager's webhook payload, or one of its alerts) as an Investigation spec."""

from __future__ import annotations

from typing import Any

__all__ = ["alert_spec"]

_SUBJECT_LABELS = {
    "pod": "Pod",
    "deployment": "Deployment",
    "statefulset": "StatefulSet",
    "daemonset": "DaemonSet",
    "job": "Job",
    "node": "Node",
    "service": "Service",
}


def alert_spec(payload: Any) -> dict[str, Any]:
    """The spec fields an alert gives: title, description, source, subject and context. Raises
    ValueError naming what is missing."""
    if isinstance(payload, dict) and isinstance(payload.get("alerts"), list):
        if not payload["alerts"]:
            raise ValueError("the payload has no alerts")
        payload = payload["alerts"][0]
    if not isinstance(payload, dict) or not isinstance(payload.get("labels"), dict):
        raise ValueError("expected an Alertmanager alert: an object with `labels` (or a webhook payload with `alerts`)")
    labels = {str(k): str(v) for k, v in payload["labels"].items()}
    annotations = {str(k): str(v) for k, v in (payload.get("annotations") or {}).items()}
    name = labels.get("alertname")
    if not name:
        raise ValueError("labels.alertname is missing")
    subject: dict[str, Any] = {}
    for label, kind in _SUBJECT_LABELS.items():
        if label in labels:
            subject = {"kind": kind, "name": labels[label]}
            break
    if "namespace" in labels:
        subject["namespace"] = labels["namespace"]
    where = "/".join(x for x in (labels.get("namespace"), subject.get("name")) if x)
    spec: dict[str, Any] = {
        "title": f"{name} on {where}"[:1024] if where else name[:1024],
        "source": "prometheus",
        "context": {"labels": labels, "annotations": annotations, "startsAt": payload.get("startsAt")},
    }
    description = annotations.get("description") or annotations.get("summary") or annotations.get("message")
    if description:
        spec["description"] = description[:65536]
    if subject:
        spec["subject"] = subject
    return spec
