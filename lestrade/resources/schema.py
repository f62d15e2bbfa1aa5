"""Turn a pydantic model's JSON schema into a Kubernetes structural OpenAPI v3 schema.

The apiserver only accepts structural schemas: every node has a type, there is no `$ref`, and
`anyOf`/`oneOf` may not carry types. Pydantic emits JSON Schema 2020-12 with `$defs` and
`anyOf: [X, {type: null}]` for every Optional field. This module inlines references, reduces
"X or null" to X (an optional field is simply absent on the wire, never null), and translates
the few spots where OpenAPI v3.0 differs (numeric exclusive bounds, `const`).

It refuses anything it does not understand instead of passing it through, so a model change
that Kubernetes could not express fails at generation time rather than at `kubectl apply`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["structural_schema", "SchemaError"]

# Keys that mean the same in JSON Schema and in the apiserver's OpenAPI v3 dialect.
_PASSTHROUGH = frozenset(
    {
        "type",
        "format",
        "description",
        "enum",
        "default",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
    }
)
# Order of keys in the output, so the generated YAML reads top-down: what it is, then limits,
# then children, then Kubernetes extensions.
_KEY_ORDER = (
    "type",
    "format",
    "description",
    "default",
    "enum",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "properties",
    "items",
    "additionalProperties",
)
# Pydantic-only annotations with no meaning for the apiserver.
_DROPPED = frozenset({"title", "propertyNames"})


class SchemaError(ValueError):
    """The model uses a construct a structural schema cannot express."""


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema for `model` (validation mode, camelCase names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _convert(raw, defs, path=model.__name__)


def _resolve(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Replace a reference or an "X or null" union by X, keeping the referring node's keys.

    The referring node's keys win: a field's description is more specific than the
    description of the type it uses.
    """
    site = {k: v for k, v in node.items() if k not in ("$ref", "anyOf", "allOf", "oneOf")}
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in defs:
            raise SchemaError(f"{path}: unknown reference {node['$ref']}")
        return {**_resolve(defs[name], defs, path), **site}
    if "oneOf" in node:
        raise SchemaError(f"{path}: unions (oneOf) cannot be expressed structurally")
    for key in ("anyOf", "allOf"):
        if key in node:
            options = [o for o in node[key] if o != {"type": "null"}]
            if len(options) != 1:
                raise SchemaError(f"{path}: unions ({key}) cannot be expressed structurally")
            return {**_resolve(options[0], defs, path), **site}
    return node


def _convert(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    node = _resolve(node, defs, path)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "default" and value is None:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            if isinstance(value, bool):
                out[key] = value
            else:
                out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
                out[key] = True
        elif key == "properties":
            out["properties"] = {name: _convert(sub, defs, f"{path}.{name}") for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is False:
                continue  # the structural default: unknown fields are pruned
            else:
                out["additionalProperties"] = _convert(value, defs, f"{path}{{}}")
        elif key in _PASSTHROUGH or key.startswith("x-kubernetes-"):
            out[key] = value
        else:
            raise SchemaError(f"{path}: unsupported JSON schema keyword {key!r}")
    if "type" not in out and "const" in node:
        out["type"] = _json_type(node["const"], path)
    if out.get("type") == "object" and not ("properties" in out or "additionalProperties" in out):
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "type" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        raise SchemaError(f"{path}: no type (Any is only allowed inside free-form objects)")
    if "required" in out and not out["required"]:
        del out["required"]
    return _ordered(out)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    known = {k: node[k] for k in _KEY_ORDER if k in node}
    extensions = {k: v for k, v in sorted(node.items()) if k not in known}
    return {**known, **extensions}


def _json_type(value: Any, path: str) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise SchemaError(f"{path}: constant {value!r} has no simple type")
