"""What kubectl prints as data reaches the model only from objects masked structurally first.

kubectl's own output formats can print a value without its key (`-o jsonpath`,
`-o custom-columns`) or transform it inside kubectl (`-o go-template` with hex, slices, URL or
JS quoting), so no text rule applied afterwards can tell a password from any other word. So the
bash tool never lets kubectl render data: a kubectl command with a data output format is run
with `-o json` instead, every object is masked by `clean_object` (the same structural rules as
the kubectl_* tools: credential-named keys of ConfigMaps, env entries, args and annotations
masked whole, Secrets reduced to key sizes), and only then rendered here in the requested
format (`bash.jsonpath`). Go templates are refused (a second template engine is not worth
re-implementing; jsonpath and jq cover the same ground), and so is every format that reads a
file (`*-file`, `templatefile`). `kubectl get --raw` output is masked the same way when it is
JSON. `kubectl get`'s tables (the default, `-o wide`) are never kubectl's own either: a printer
column can show any field (a CRD's `additionalPrinterColumns` a password or an env value), so
kubectl lists the objects as JSON and each row is the server's Table row for that object with
its cells masked structurally (`render_table_output`, `sanitize.mask_table`). `-o name` and
other verbs' text (`describe`, `logs`, `events`, `top`) are guarded by the text rules.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import yaml

from lestrade.operator.tools.bash.jsonpath import (
    JsonPathError,
    jsonpath_results,
    render_custom_columns,
    render_jsonpath,
)
from lestrade.operator.tools.kubernetes.api import ApiResource, KubeApi, KubeError
from lestrade.operator.tools.kubernetes.sanitize import clean_object
from lestrade.operator.tools.redact import REDACTED, redact_object

__all__ = [
    "OutputPlan",
    "TableOptions",
    "KubectlOutputRefused",
    "output_plan",
    "format_refusal",
    "render_output",
    "render_table_output",
    "TABLE_FORMATS",
]

TABLE_FORMATS = frozenset({"", "name", "wide"})
_RENDERED = ("json", "yaml", "kyaml", "jsonpath", "jsonpath-as-json", "custom-columns")
BOOL_LETTERS = frozenset("AwpRhqit")
"""Short switches of kubectl; any other letter takes a value (`-nsecret` is a namespace)."""
KNOWN_VALUE_FLAGS = frozenset(
    {
        "-n",
        "--namespace",
        "-l",
        "--selector",
        "--field-selector",
        "-c",
        "--container",
        "-L",
        "--label-columns",
        "--tail",
        "--since",
        "--since-time",
        "--request-timeout",
        "--chunk-size",
        "--max-log-requests",
        "--limit-bytes",
        "--timeout",
        "--revision",
        "--api-version",
        "--api-group",
        "--types",
    }
)
"""Flags whose value is the next word and certainly not a resource (so a namespace called `all`
is not one); shared with the bash tool's kubectl policy."""
# Flags whose value is the next word (so that word is not taken for an output flag).
_VALUE_FLAGS = KNOWN_VALUE_FLAGS | {
    "--sort-by",
    "--raw",
    "--filename",
    "--kustomize",
    "--for",
    "--subresource",
    "--verbs",
    "--pod-running-timeout",
}


class KubectlOutputRefused(Exception):
    """A format the bash tool does not let kubectl print."""


@dataclass(frozen=True)
class TableOptions:
    """How `kubectl get` would have printed its table (the flags taken off its command line)."""

    wide: bool = False
    all_namespaces: bool = False
    show_labels: bool = False
    show_kind: bool = False
    label_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputPlan:
    argv: list[str]  # the kubectl command, from `kubectl` on, asking for `-o json`
    format: str  # one of _RENDERED, "table" (`kubectl get`'s table) or "raw" (`get --raw`: JSON when it parses)
    template: str = ""
    headers: bool = True
    table: TableOptions | None = None


def format_refusal(fmt: str, template_flag: bool = False) -> str | None:
    """Why kubectl may not print this output format in the bash tool (None: it may)."""
    name = fmt.split("=", 1)[0].strip().lower()
    if name.endswith("-file") or name == "templatefile":
        return f"`-o {name}` reads a template from a file; no output format may read files"
    if name in ("go-template", "template") or (template_flag and name in ("", "name", "wide")):
        return (
            "Go templates (`-o go-template`, `-o template`, `--template`) are not available in the bash "
            "tool: use `-o jsonpath=...`, `-o custom-columns=...` or `-o json | jq ...`"
        )
    if name not in TABLE_FORMATS and name not in _RENDERED:
        return f"`-o {name}` is not an output format the bash tool can print"
    return None


def _split(tokens: list[str]) -> tuple[list[str], list[str], str | None, bool]:
    """(kept tokens, words, last output format or None, whether --template was given);
    `--template`'s value is returned as the format's template when the format needs one."""
    kept: list[str] = []
    words: list[str] = []
    output: str | None = None
    template: str | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            kept += tokens[i - 1 :]
            words += tokens[i:]
            break
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if name in ("--output", "--template"):
                if not eq:
                    value = tokens[i] if i < len(tokens) else ""
                    i += 1
                if name == "--output":
                    output = value
                else:
                    template = value
                continue
            if name == "--allow-missing-template-keys":
                continue  # missing keys always print nothing here
            kept.append(token)
            if not eq and name in _VALUE_FLAGS and i < len(tokens):
                kept.append(tokens[i])
                i += 1
            continue
        if token.startswith("-") and len(token) > 1:
            letters = ""
            for pos, letter in enumerate(token[1:], start=1):
                if letter in BOOL_LETTERS:
                    letters += letter
                    continue
                rest = token[pos + 1 :]
                rest = rest[1:] if rest.startswith("=") else rest
                took_next = False
                if not rest and i < len(tokens):
                    rest = tokens[i]
                    i += 1
                    took_next = True
                if letter == "o":
                    output = rest
                    if letters:
                        kept.append("-" + letters)
                else:
                    kept.append(token)
                    if took_next:
                        kept.append(rest)
                break
            else:
                kept.append(token)
            continue
        kept.append(token)
        words.append(token)
    return kept, words, output, template is not None


def _template_value(tokens: list[str]) -> str | None:
    for i, token in enumerate(tokens):
        if token == "--":
            return None
        if token == "--template":
            return tokens[i + 1] if i + 1 < len(tokens) else ""
        if token.startswith("--template="):
            return token.split("=", 1)[1]
    return None


def output_plan(argv: list[str]) -> OutputPlan | None:
    """How to run this kubectl command (`argv[0]` is kubectl) so that its data is masked first;
    None when kubectl prints no data format (tables, names, logs). Raises
    `KubectlOutputRefused` for formats that are never printed."""
    tokens = argv[1:]
    kept, words, output, template_flag = _split(tokens)
    if words[:1] == ["explain"]:
        return None  # the schema, not objects; its `-o plaintext` formats are text
    template = _template_value(tokens)
    fmt = output if output is not None else ""
    reason = format_refusal(fmt, template_flag)
    if reason:
        raise KubectlOutputRefused(reason)
    name, _, value = fmt.partition("=")
    name = name.strip().lower()
    if name in TABLE_FORMATS:
        if any(t == "--raw" or t.startswith("--raw=") for t in kept):
            return OutputPlan(argv=[argv[0], *kept], format="raw")
        if name == "name" or words[:1] != ["get"]:
            return None
        return _table_plan(argv[0], kept, wide=name == "wide")
    if name in ("jsonpath", "jsonpath-as-json") and not value:
        value = template or ""
    if name in ("jsonpath", "jsonpath-as-json", "custom-columns") and not value:
        raise KubectlOutputRefused(f"`-o {name}` needs a template")
    headers = "--no-headers" not in kept and "--no-headers=true" not in kept
    return OutputPlan(argv=[argv[0], *kept, "-o", "json"], format=name, template=value, headers=headers)


_TABLE_SWITCHES = ("--show-labels", "--show-kind", "--no-headers", "--server-print")


def _all_namespaces(token: str) -> bool:
    if token == "--all-namespaces" or token.startswith("--all-namespaces="):
        return token.partition("=")[2].lower() in ("", "true")
    if token.startswith("-") and not token.startswith("--"):
        for letter in token[1:]:
            if letter == "A":
                return True
            if letter not in BOOL_LETTERS:
                return False
    return False


def _table_plan(kubectl: str, kept: list[str], *, wide: bool) -> OutputPlan:
    """`kubectl get`'s table, printed here: kubectl is asked for `-o json` (it resolves the
    kinds, names, selectors and namespaces as usual), then each object's row is fetched from
    the server's Table with its cells masked structurally (`render_table_output`)."""
    args: list[str] = []
    switches: dict[str, bool] = {}
    labels: list[str] = []
    i = 0
    while i < len(kept):
        token = kept[i]
        i += 1
        if token == "--":
            args += kept[i - 1 :]
            break
        name, eq, value = token.partition("=")
        if name in _TABLE_SWITCHES:
            switches[name] = value.lower() in ("", "true") if eq else True
            continue
        if name == "--label-columns" or token.startswith("-L"):
            if name == "--label-columns":
                column = value if eq else (kept[i] if i < len(kept) else "")
                i += 0 if eq else 1
            else:
                column = token[2:].removeprefix("=") or (kept[i] if i < len(kept) else "")
                i += 0 if token[2:] else 1
            labels += [c.strip() for c in column.split(",") if c.strip()]
            continue
        args.append(token)
    options = TableOptions(
        wide=wide,
        all_namespaces=any(_all_namespaces(t) for t in args),
        show_labels=switches.get("--show-labels", False),
        show_kind=switches.get("--show-kind", False),
        label_columns=tuple(labels),
    )
    return OutputPlan(
        argv=[kubectl, *args, "-o", "json"],
        format="table",
        headers=not switches.get("--no-headers", False),
        table=options,
    )


def _documents(text: str) -> list[Any]:
    """The JSON values kubectl printed (one, or several with `xargs` and watches)."""
    decoder = json.JSONDecoder()
    docs: list[Any] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return docs
        value, pos = decoder.raw_decode(text, pos)
        docs.append(value)


def _masked(doc: Any) -> Any:
    """`clean_object` for objects (each item of a List too), `redact_object` for anything else."""
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        out = redact_object({k: v for k, v in doc.items() if k != "items"})
        out["items"] = [_masked(item) for item in doc["items"]]
        return out
    if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and isinstance(doc.get("metadata"), dict):
        return clean_object(doc)
    return redact_object(doc)


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 16)


def render_output(plan: OutputPlan, text: str) -> str:
    """kubectl's `-o json` output, masked, in the format asked for. Never the raw text: what
    cannot be read as JSON is withheld (except `--raw` text, which the text rules guard)."""
    try:
        docs = _documents(text)
    except ValueError:
        if plan.format == "raw":
            return text
        return "[kubectl printed output that is not JSON; withheld because it could not be masked]\n"
    docs = [_masked(doc) for doc in docs]
    try:
        if plan.format in ("json", "raw"):
            return "".join(json.dumps(doc, indent=4, ensure_ascii=False) + "\n" for doc in docs)
        if plan.format in ("yaml", "kyaml"):
            return "---\n".join(_yaml(doc) for doc in docs)
        if plan.format == "jsonpath":
            return "".join(render_jsonpath(plan.template, doc) for doc in docs)
        if plan.format == "jsonpath-as-json":
            return "".join(json.dumps(jsonpath_results(plan.template, doc), indent=4) + "\n" for doc in docs)
        return "".join(render_custom_columns(plan.template, doc, headers=plan.headers) for doc in docs)
    except JsonPathError as exc:
        return f"error: {exc} ({REDACTED} values are masked before rendering)\n"


# --- tables ---------------------------------------------------------------------------------------

_INLINE_FETCH = 5
"""Objects of one kind and namespace fetched one by one up to this many; more, one list."""


def _objects(docs: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):
            out += _objects(doc["items"])
        elif isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and doc.get("kind"):
            out.append(doc)
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "<none>"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False)
    return str(value).replace("\r", " ").replace("\n", " ")


def _tabulate(lines: list[list[str]]) -> str:
    """kubectl's tabwriter: each column as wide as its widest cell plus three blanks."""
    if not lines:
        return ""
    columns = max(len(line) for line in lines)
    widths = [max((len(line[i]) for line in lines if i < len(line)), default=0) for i in range(columns)]
    return "".join(
        "".join(cell.ljust(widths[i] + 3) if i < len(line) - 1 else cell for i, cell in enumerate(line)).rstrip() + "\n"
        for line in lines
    )


async def _rows_for(
    api: KubeApi, res: ApiResource, namespace: str | None, objs: list[dict[str, Any]], *, listing: bool = False
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(column definitions, uid → masked row) of these objects, from the server's Table."""
    tables: list[dict[str, Any]] = []
    if not listing and len(objs) <= _INLINE_FETCH:
        for obj in objs:
            try:
                tables.append(await api.table(res, namespace, obj["metadata"].get("name")))
            except KubeError:
                continue  # deleted since kubectl listed it
    else:
        tables.append(await api.table(res, namespace))
    columns = next((t.get("columnDefinitions") for t in tables if t.get("columnDefinitions")), None) or []
    rows = {}
    for t in tables:
        for row in t.get("rows") or []:
            uid = ((row.get("object") or {}).get("metadata") or {}).get("uid")
            if uid:
                rows[uid] = row
    return columns, rows


async def render_table_output(plan: OutputPlan, text: str, api: KubeApi | None) -> str:
    """`kubectl get`'s table from the objects kubectl listed (`-o json`): each row is the
    server's own Table row for that object (built-in printers, a CRD's printer columns, `-o
    wide`'s extra ones), its cells masked by `mask_table` (`KubeApi.table`) before they are
    printed here the way kubectl prints them. Never kubectl's own table."""
    options = plan.table or TableOptions()
    if not text.strip():
        return ""  # kubectl failed: its error is on stderr
    try:
        objs = _objects(_documents(text))
    except ValueError:
        return "[kubectl printed output that is not JSON; withheld because it could not be masked]\n"
    if not objs:
        return "No resources found.\n"
    if api is None:
        return "[kubectl's table is withheld: the bash tool has no identity to read the masked table with]\n"
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for obj in objs:
        groups.setdefault((str(obj.get("apiVersion") or ""), str(obj["kind"])), []).append(obj)
    show_kind = options.show_kind or len(groups) > 1
    sections: list[str] = []
    missing = 0
    for (api_version, kind), members in groups.items():
        try:
            res = await api.resource_of(api_version, kind)
            if res is None:
                sections.append(f"error: the server has no resource for {kind} ({api_version})\n")
                continue
            by_ns: dict[str, list[dict[str, Any]]] = {}
            for obj in members:
                by_ns.setdefault(obj["metadata"].get("namespace") or "", []).append(obj)
            columns: list[dict[str, Any]] = []
            rows: dict[str, dict[str, Any]] = {}
            if res.namespaced and len(by_ns) > 1:  # `-A`: one list, not one per namespace
                with contextlib.suppress(KubeError):  # a scoped identity may not list everywhere
                    columns, rows = await _rows_for(api, res, None, members, listing=True)
                    by_ns = {}
            for ns, in_ns in by_ns.items():
                found_columns, found = await _rows_for(api, res, ns or None, in_ns)
                columns = columns or found_columns
                rows.update(found)
        except KubeError as exc:
            sections.append(f"error: {exc}\n")
            continue
        keep = [i for i, c in enumerate(columns) if options.wide or int(c.get("priority", 0) or 0) == 0]
        name_at = next((n for n, i in enumerate(keep) if columns[i].get("format") == "name"), None)
        prefix = kind.lower() + (f".{res.group}" if res.group else "") + "/"
        header = [str(columns[i].get("name", "")).upper() for i in keep]
        if options.all_namespaces and res.namespaced:
            header.insert(0, "NAMESPACE")
        header += [c.rsplit("/", 1)[-1].upper() for c in options.label_columns]
        if options.show_labels:
            header.append("LABELS")
        lines = [header] if plan.headers else []
        for obj in members:
            row = rows.get(obj["metadata"].get("uid") or "")
            if row is None:
                missing += 1
                continue
            cells = row.get("cells") or []
            meta = (row.get("object") or {}).get("metadata") or {}
            line = [_cell(cells[i]) if i < len(cells) else "" for i in keep]
            if show_kind and name_at is not None:
                line[name_at] = prefix + line[name_at]
            if options.all_namespaces and res.namespaced:
                line.insert(0, str(meta.get("namespace") or ""))
            labels = meta.get("labels") or {}
            line += [str(labels.get(c, "")) for c in options.label_columns]
            if options.show_labels:
                line.append(",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>")
            lines.append(line)
        sections.append(_tabulate(lines))
    out = "\n".join(s for s in sections if s)
    if missing:
        out += f"[{missing} object(s) changed or went away while the table was read; run the command again]\n"
    return out
