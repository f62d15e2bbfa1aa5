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
JSON. Tables (`-o wide`, the default) and `-o name` are printed by kubectl and guarded by the
text rules like any other text.
"""

from __future__ import annotations

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
from lestrade.operator.tools.kubernetes.sanitize import clean_object
from lestrade.operator.tools.redact import REDACTED, redact_object

__all__ = ["OutputPlan", "KubectlOutputRefused", "output_plan", "format_refusal", "render_output", "TABLE_FORMATS"]

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
class OutputPlan:
    argv: list[str]  # the kubectl command, from `kubectl` on, asking for `-o json`
    format: str  # one of _RENDERED, or "raw" (`get --raw`: JSON when it parses)
    template: str = ""
    headers: bool = True


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
        return None
    if name in ("jsonpath", "jsonpath-as-json") and not value:
        value = template or ""
    if name in ("jsonpath", "jsonpath-as-json", "custom-columns") and not value:
        raise KubectlOutputRefused(f"`-o {name}` needs a template")
    headers = "--no-headers" not in kept and "--no-headers=true" not in kept
    return OutputPlan(argv=[argv[0], *kept, "-o", "json"], format=name, template=value, headers=headers)


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
