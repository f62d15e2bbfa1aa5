"""Prepare Kubernetes objects for a model: Secret values removed, noise dropped, credentials masked.

Structural rules run before any rendering, so the text-level `redact` is a second line of
defence rather than the only one. A Secret keeps its name, type, labels and the *names and
sizes* of its data keys — enough to troubleshoot "key missing" or "empty value" problems —
and nothing else; its `last-applied-configuration` annotation (which holds the whole manifest,
values included, when the Secret was created with `kubectl apply`) is dropped outright.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from lestrade.operator.tools.redact import redact_object

__all__ = ["LAST_APPLIED", "secret_view", "clean_object", "secret_key_sizes"]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def secret_key_sizes(secret: dict[str, Any]) -> dict[str, int]:
    """Data key → decoded size in bytes (what `kubectl describe secret` shows)."""
    sizes: dict[str, int] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            sizes[key] = len(base64.b64decode(value or "", validate=True))
        except (binascii.Error, ValueError):
            sizes[key] = len(value or "")
    for key, value in (secret.get("stringData") or {}).items():
        sizes[key] = len((value or "").encode())
    return sizes


def _safe_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    keep = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        keep["annotations"] = annotations
    else:
        keep.pop("annotations", None)
    return keep


def secret_view(secret: dict[str, Any]) -> dict[str, Any]:
    """A Secret with every value replaced by its size; safe to show in full."""
    sizes = secret_key_sizes(secret)
    return {
        "apiVersion": secret.get("apiVersion", "v1"),
        "kind": "Secret",
        "metadata": redact_object(_safe_metadata(secret.get("metadata") or {})),
        "type": secret.get("type"),
        "data": {k: f"<{n} bytes, value hidden>" for k, n in sizes.items()},
    }


def clean_object(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop managedFields, and mask credential-looking values; Secrets become `secret_view`."""
    if obj.get("kind") == "Secret":
        return secret_view(obj)
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return redact_object(out)
