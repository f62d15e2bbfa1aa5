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
import json
import re
from typing import Any

from lestrade.operator.tools.redact import REDACTED, redact_object

__all__ = ["LAST_APPLIED", "secret_view", "clean_object", "secret_key_sizes", "mask_table"]

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


# --- server-side tables ---------------------------------------------------------------------------

_SHORT_SECRET = 6
"""Masked values shorter than this are replaced in a cell only as a whole word (a two-letter
password must not turn every `ab` in a table into a mask)."""


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _masked_values(original: Any, masked: Any, found: dict[str, str], *, top: bool = False) -> None:
    """Every value of `original` that the structural rules changed, mapped to what they made of
    it (a subtree they dropped or reshaped: each of its values, masked whole)."""
    if isinstance(original, dict) and isinstance(masked, dict):
        for key, value in original.items():
            if top and key == "metadata" and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "managedFields"}  # dropped as noise
            if key in masked:
                _masked_values(value, masked[key], found)
            else:
                _masked_values(value, None, found)
        return
    if isinstance(original, list) and isinstance(masked, list) and len(original) == len(masked):
        for value, mask in zip(original, masked, strict=True):
            _masked_values(value, mask, found)
        return
    if isinstance(original, (dict, list)):
        for leaf in _leaves(original):
            if leaf is not None and not isinstance(leaf, bool) and str(leaf):
                found.setdefault(str(leaf), REDACTED)
        return
    if original is None or isinstance(original, bool) or original == masked:
        return
    text = str(original)
    if text:
        found[text] = masked if isinstance(masked, str) and masked != text else REDACTED


def _mask_cell(cell: Any, found: dict[str, str]) -> Any:
    if cell is None or isinstance(cell, bool) or not found:
        return cell
    text = cell if isinstance(cell, str) else json.dumps(cell) if isinstance(cell, (dict, list)) else str(cell)
    if text in found:
        return found[text]
    out = text
    for value in sorted(found, key=len, reverse=True):
        replacement = found[value]
        forms = {value, json.dumps(value)[1:-1]}
        for form in forms:
            if form not in out:
                continue
            if len(value) >= _SHORT_SECRET:
                out = out.replace(form, replacement)
            else:
                pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(form)}(?![A-Za-z0-9_])")
                out = pattern.sub(replacement.replace("\\", "\\\\"), out)
    if out == text:
        return cell
    return out


def mask_table(table: dict[str, Any]) -> dict[str, Any]:
    """A meta.k8s.io Table asked for with `includeObject=Object`, its cells masked structurally.

    A cell is whatever the server's printer took from the object (for a CRD, any field its
    `additionalPrinterColumns` name: a ConfigMap value, an env literal, a spec password), so no
    text rule can tell a credential there from a status word. Each row's object goes through
    `clean_object` (the rules every other view of an object uses); every value those rules
    changed is then masked wherever it appears in the row's cells (the cell whole, or that
    value within it, also JSON-escaped). The row keeps only the masked object's metadata, as
    `includeObject=Metadata` would have given. A row without its object has every cell masked
    (nothing says which are safe)."""
    out = dict(table)
    rows = []
    for row in table.get("rows") or []:
        row = dict(row)
        obj = row.get("object")
        cells = list(row.get("cells") or [])
        if not isinstance(obj, dict) or "metadata" not in obj:
            row["cells"] = [REDACTED for _ in cells]
            rows.append(row)
            continue
        masked = clean_object(obj)
        found: dict[str, str] = {}
        _masked_values(obj, masked, found, top=True)
        if obj.get("kind") == "Secret":  # decoded values too, should a printer ever decode
            for value in (obj.get("data") or {}).values():
                try:
                    decoded = base64.b64decode(value or "", validate=True).decode("utf-8")
                except (binascii.Error, ValueError):
                    continue
                if decoded.strip():
                    found.setdefault(decoded, REDACTED)
        row["cells"] = [_mask_cell(cell, found) for cell in cells]
        row["object"] = {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": masked.get("metadata") or {},
        }
        rows.append(row)
    out["rows"] = rows
    return out
