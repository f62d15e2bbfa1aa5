"""kubectl's JSONPath templates (`-o jsonpath=`, `-o custom-columns=`), rendered in Python.

Why not let kubectl render them: kubectl prints the selected values without their keys, so a
password picked out of a ConfigMap or an env list reaches the output bare and no text rule can
recognise it. The bash tool therefore asks kubectl for `-o json`, masks the objects
structurally (`redact_object`), and renders the requested template here, from the masked
objects (see `bash.kubectl_output`).

The dialect is client-go's (k8s.io/client-go/util/jsonpath): text with `{...}` actions; an
action is a path (`.a.b`, `..name`, `[n]`, `[s:e:step]`, `[*]`, `.*`, `['key']`, `[a,b]`,
`[?(@.f == "x")]`), a string literal, `range PATH` ... `end`. Missing keys print nothing, as
with kubectl's default `--allow-missing-template-keys`. Anything else raises `JsonPathError`
with a message naming what is not supported; nothing is ever evaluated from the template but
these lookups.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JsonPathError", "render_jsonpath", "jsonpath_results", "render_custom_columns"]

_MISSING = object()


class JsonPathError(ValueError):
    """The template is not one this renderer reads."""


# --- template: text and actions -----------------------------------------------------------------


@dataclass
class _Node:
    kind: str  # "text", "path", "range"
    value: Any = None
    body: list[_Node] = field(default_factory=list)


def _actions(template: str) -> list[tuple[str, str]]:
    """[("text", s) | ("action", s)]; braces inside quoted strings do not end an action."""
    out: list[tuple[str, str]] = []
    i, text = 0, []
    while i < len(template):
        ch = template[i]
        if ch != "{":
            text.append(ch)
            i += 1
            continue
        if text:
            out.append(("text", "".join(text)))
            text = []
        j, quote = i + 1, ""
        while j < len(template):
            c = template[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
            elif c == "}":
                break
            j += 1
        if j >= len(template):
            raise JsonPathError(f"unclosed action in {template!r}")
        out.append(("action", template[i + 1 : j].strip()))
        i = j + 1
    if text:
        out.append(("text", "".join(text)))
    return out


def _parse_template(template: str) -> list[_Node]:
    root: list[_Node] = []
    stack = [root]
    for kind, value in _actions(template):
        if kind == "text":
            stack[-1].append(_Node("text", value))
        elif value == "end":
            if len(stack) == 1:
                raise JsonPathError("`end` without `range`")
            stack.pop()
        elif value.startswith("range ") or value == "range":
            node = _Node("range", _parse_path(value[5:].strip()))
            stack[-1].append(node)
            stack.append(node.body)
        elif value[:1] in "\"'":
            stack[-1].append(_Node("text", _string_literal(value)))
        elif value == "":
            continue
        else:
            stack[-1].append(_Node("path", _parse_path(value)))
    if len(stack) != 1:
        raise JsonPathError("`range` without `end`")
    return root


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def _string_literal(value: str) -> str:
    quote = value[0]
    if len(value) < 2 or value[-1] != quote:
        raise JsonPathError(f"unterminated string {value!r}")
    out, i, body = [], 0, value[1:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


# --- paths --------------------------------------------------------------------------------------

# A step: ("field", name) | ("recursive", name | None) | ("wildcard",) | ("index", n)
# | ("slice", s, e, step) | ("union", [keys or ints]) | ("filter", left, op, right)
_NAME = re.compile(r"(?:\\.|[^.\[\]\s\\])+")
_INT = re.compile(r"-?\d+")
_FILTER = re.compile(r"\?\((.*)\)\Z", re.S)
_COMPARE = re.compile(r"\s*(==|!=|<=|>=|<|>|=~)\s*")


def _parse_path(text: str) -> list[tuple[Any, ...]]:
    text = text.strip()
    if text.startswith("$"):
        text = text[1:]
    elif text.startswith("@"):
        text = text[1:]
    steps: list[tuple[Any, ...]] = []
    i = 0
    while i < len(text):
        if text.startswith("..", i):
            i += 2
            m = _NAME.match(text, i)
            if m:
                steps.append(("recursive", _unescape(m.group())))
                i = m.end()
            else:
                steps.append(("recursive", None))
            continue
        ch = text[i]
        if ch == ".":
            i += 1
            if text.startswith("*", i):
                steps.append(("wildcard",))
                i += 1
                continue
            m = _NAME.match(text, i)
            if not m:
                if i >= len(text):
                    continue  # `{.}`: the current object
                raise JsonPathError(f"cannot read the path {text!r} at {text[i:]!r}")
            steps.append(("field", _unescape(m.group())))
            i = m.end()
        elif ch == "[":
            end = _bracket_end(text, i)
            steps.append(_bracket(text[i + 1 : end].strip()))
            i = end + 1
        elif i == 0:
            m = _NAME.match(text, i)  # custom-columns allow `metadata.name`
            if not m:
                raise JsonPathError(f"cannot read the path {text!r}")
            steps.append(("field", _unescape(m.group())))
            i = m.end()
        else:
            raise JsonPathError(f"cannot read the path {text!r} at {text[i:]!r}")
    return steps


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def _bracket_end(text: str, start: int) -> int:
    depth, quote, j = 0, "", start
    while j < len(text):
        c = text[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise JsonPathError(f"unclosed [ in {text!r}")


def _bracket(inner: str) -> tuple[Any, ...]:
    if inner == "*":
        return ("wildcard",)
    filt = _FILTER.match(inner)
    if filt:
        return _filter(filt.group(1).strip())
    if ":" in inner and not inner.startswith(("'", '"')):
        parts = inner.split(":")
        if len(parts) > 3 or not all(p.strip() == "" or _INT.fullmatch(p.strip()) for p in parts):
            raise JsonPathError(f"cannot read the slice [{inner}]")
        nums = [int(p) if p.strip() else None for p in parts] + [None] * (3 - len(parts))
        return ("slice", *nums)
    items = [p.strip() for p in _split_union(inner)]
    keys: list[Any] = []
    for item in items:
        if _INT.fullmatch(item):
            keys.append(int(item))
        elif item[:1] in "\"'":
            keys.append(_string_literal(item))
        else:
            raise JsonPathError(f"cannot read [{inner}]")
    if len(keys) == 1:
        return ("index", keys[0]) if isinstance(keys[0], int) else ("field", keys[0])
    return ("union", keys)


def _split_union(inner: str) -> list[str]:
    parts, quote, current = [], "", []
    i = 0
    while i < len(inner):
        c = inner[i]
        if quote:
            current.append(c)
            if c == "\\" and i + 1 < len(inner):
                current.append(inner[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
            current.append(c)
        elif c == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current))
    return parts


def _filter(expr: str) -> tuple[Any, ...]:
    m = None
    quote = ""
    for i, c in enumerate(expr):  # the first operator outside a string literal
        if quote:
            if c == quote:
                quote = ""
            continue
        if c in "\"'":
            quote = c
            continue
        m = _COMPARE.match(expr, i)
        if m and m.start() == i and m.group(1):
            break
        m = None
    if m is None:
        return ("filter", _operand(expr), None, None)
    if m.group(1) == "=~":
        raise JsonPathError("regular expressions in filters are not supported")
    return ("filter", _operand(expr[: m.start()].strip()), m.group(1), _operand(expr[m.end() :].strip()))


def _operand(text: str) -> tuple[str, Any]:
    if text.startswith("@") or text.startswith("$"):
        return ("path", _parse_path(text))
    if text[:1] in "\"'":
        return ("literal", _string_literal(text))
    if _INT.fullmatch(text):
        return ("literal", int(text))
    try:
        return ("literal", float(text))
    except ValueError:
        if text in ("true", "false"):
            return ("literal", text == "true")
        raise JsonPathError(f"cannot read the filter operand {text!r}") from None


# --- evaluation ---------------------------------------------------------------------------------


def _walk(value: Any) -> list[Any]:
    """Every value below `value`, itself first (for `..`)."""
    out = [value]
    if isinstance(value, dict):
        for v in value.values():
            out.extend(_walk(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(_walk(v))
    return out


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _apply(step: tuple[Any, ...], current: list[Any], root: Any) -> list[Any]:
    kind = step[0]
    out: list[Any] = []
    for value in current:
        if kind == "field":
            if isinstance(value, dict) and step[1] in value:
                out.append(value[step[1]])
        elif kind == "wildcard":
            out.extend(_children(value))
        elif kind == "recursive":
            for node in _walk(value):
                if step[1] is None:
                    out.extend(_children(node))
                elif isinstance(node, dict) and step[1] in node:
                    out.append(node[step[1]])
        elif kind == "index":
            if isinstance(value, list) and -len(value) <= step[1] < len(value):
                out.append(value[step[1]])
        elif kind == "slice":
            if isinstance(value, list):
                out.extend(value[slice(step[1], step[2], step[3])])
        elif kind == "union":
            for key in step[1]:
                if isinstance(key, int) and isinstance(value, list) and -len(value) <= key < len(value):
                    out.append(value[key])
                elif isinstance(key, str) and isinstance(value, dict) and key in value:
                    out.append(value[key])
        elif kind == "filter":
            items = value if isinstance(value, list) else _children(value)
            out.extend(item for item in items if _matches(step, item, root))
    return out


def _operand_values(operand: tuple[str, Any], item: Any, root: Any) -> list[Any]:
    if operand[0] == "literal":
        return [operand[1]]
    return _evaluate(operand[1], item, root)


def _matches(step: tuple[Any, ...], item: Any, root: Any) -> bool:
    _, left, op, right = step
    lefts = _operand_values(left, item, root)
    if op is None:
        return bool(lefts)
    rights = _operand_values(right, item, root)
    for a in lefts:
        for b in rights:
            try:
                if {"==": a == b, "!=": a != b}.get(op) if op in ("==", "!=") else _order(a, b, op):
                    return True
            except TypeError:
                continue
    return False


def _order(a: Any, b: Any, op: str) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return False
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]


def _evaluate(steps: list[tuple[Any, ...]], current: Any, root: Any) -> list[Any]:
    values = [current]
    for step in steps:
        values = _apply(step, values, root)
    return values


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _render(nodes: list[_Node], current: Any, root: Any, out: list[str]) -> None:
    for node in nodes:
        if node.kind == "text":
            out.append(node.value)
        elif node.kind == "path":
            out.append(" ".join(_text(v) for v in _evaluate(node.value, current, root)))
        else:
            for item in _evaluate(node.value, current, root):
                _render(node.body, item, root, out)


def render_jsonpath(template: str, obj: Any) -> str:
    """`kubectl -o jsonpath=TEMPLATE` of `obj` (a JSON value)."""
    nodes = _parse_template(template)
    out: list[str] = []
    _render(nodes, obj, obj, out)
    return "".join(out)


def jsonpath_results(template: str, obj: Any) -> list[Any]:
    """The values a template selects (`-o jsonpath-as-json`)."""
    results: list[Any] = []

    def collect(nodes: list[_Node], current: Any) -> None:
        for node in nodes:
            if node.kind == "path":
                results.extend(_evaluate(node.value, current, obj))
            elif node.kind == "range":
                for item in _evaluate(node.value, current, obj):
                    collect(node.body, item)

    collect(_parse_template(template), obj)
    return results


def _column_path(spec: str) -> list[_Node]:
    spec = spec.strip()
    if spec.startswith("{") and spec.endswith("}"):
        spec = spec[1:-1]
    if not spec.startswith((".", "$", "[")):
        spec = "." + spec
    return [_Node("path", _parse_path(spec))]


def render_custom_columns(spec: str, obj: Any, *, headers: bool = True) -> str:
    """`kubectl -o custom-columns=SPEC` of `obj` (a List's items, or one object)."""
    columns: list[tuple[str, list[_Node]]] = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header:
            raise JsonPathError(f"custom-columns: {part!r} is not HEADER:PATH")
        columns.append((header, _column_path(path)))
    items = obj.get("items") if isinstance(obj, dict) and isinstance(obj.get("items"), list) else [obj]
    rows = [[h for h, _ in columns]] if headers else []
    for item in items:  # type: ignore[union-attr]
        row = []
        for _, nodes in columns:
            values = _evaluate(nodes[0].value, item, item)
            row.append(",".join(_text(v) for v in values) if values else "<none>")
        rows.append(row)
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    lines = ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"
