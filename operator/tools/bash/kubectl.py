"""kubectl under the bash tool: what is refused outright, and what runs without approval.

Refused (forbidden), whatever a human would say, because the output goes to the model or the
operator's identity would go elsewhere:
- connection and identity flags: another server, token, user, impersonation, certificates,
  kubeconfig (also from stdin: `--kubeconfig=/dev/stdin` with an exec plugin runs a command),
  a cache or profile directory (writes files), a kuberc (redefines commands);
- printing Secret data: any `get` whose output is not a table or names while a resource may be
  a Secret — `secret`, `secrets`, `sec`, `Secret.v1.`, `all`, a comma list, objects named by
  `-f`/`-k` — however `-o`/`--output`/`--template` are spelled or repeated;
- `--raw` paths that reach Secrets (also percent-encoded), `config view --raw/--flatten`,
  `create token`;
- output formats kubectl would render itself from unmasked objects: Go templates and every
  format that reads a file (`bash.kubectl_output`: the others are rendered from masked objects).
This check reads the arguments conservatively (an unknown flag may take the next word, so that
word still counts as a possible resource); it never relies on the allowlist parse.

Unattended: read-only verbs with options from the grammar below (pflag style: no abbreviations
exist, clusters and `-o=x` do).
"""

from __future__ import annotations

from urllib.parse import unquote

from lestrade.operator.tools.bash.grammar import Grammar, NotAllowed, Opt, ParsedArgs, grammar, parse_args
from lestrade.operator.tools.bash.kubectl_output import BOOL_LETTERS as _BOOL_LETTERS
from lestrade.operator.tools.bash.kubectl_output import KNOWN_VALUE_FLAGS as _KNOWN_VALUE_FLAGS
from lestrade.operator.tools.bash.kubectl_output import format_refusal

__all__ = ["kubectl_forbidden", "kubectl_read_only"]

_IDENTITY_FLAGS = (
    "--kubeconfig",
    "--server",
    "--token",
    "--as",
    "--context",
    "--cluster",
    "--user",
    "--username",
    "--password",
    "--certificate-authority",
    "--client-certificate",
    "--client-key",
    "--tls-server-name",
    "--insecure",
    "--cache-dir",
    "--profile",
    "--kuberc",
    "--kube",
)
_SAFE_OUTPUTS = {"name", "wide"}


def _identity_flag(token: str) -> str | None:
    if token.startswith("--"):
        name = token.split("=", 1)[0]
        if name.startswith(_IDENTITY_FLAGS):
            return name
        return None
    if token.startswith("-") and len(token) > 1:
        for letter in token[1:]:
            if letter == "s":
                return "-s (--server)"
            if letter not in _BOOL_LETTERS:
                break  # a value follows, or kubectl rejects the cluster
    return None


def _maybe_secret(token: str) -> bool:
    """Could this word name the Secret kind (or a set that may include it)?"""
    for item in token.replace("/", ",").split(","):
        resource = item.split(".", 1)[0].strip().lower()
        if resource == "all" or (len(resource) >= 3 and "secrets".startswith(resource)):
            return True
    return False


def _scan(tokens: list[str]) -> tuple[list[str], list[str | None], dict[str, list[str | None]]]:
    """(possible resource words, output formats, other flags with values), conservatively."""
    words: list[str] = []
    outputs: list[str | None] = []
    flags: dict[str, list[str | None]] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            words += tokens[i:]  # positional for kubectl (`get -o yaml -- secrets`)
            break
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if not eq and name in _KNOWN_VALUE_FLAGS | {
                "--output",
                "--template",
                "--sort-by",
                "--raw",
                "--filename",
                "--kustomize",
            }:
                value = tokens[i] if i < len(tokens) else ""
                i += 1
            elif not eq:
                value = None  # type: ignore[assignment] # unknown: the next word stays a possible resource
            if name == "--output":
                outputs.append(value)
            flags.setdefault(name, []).append(value)
            continue
        if token.startswith("-") and len(token) > 1:
            for pos, letter in enumerate(token[1:], start=1):
                if letter in _BOOL_LETTERS:
                    flags.setdefault(f"-{letter}", []).append(None)
                    continue
                rest = token[pos + 1 :]
                rest = rest[1:] if rest.startswith("=") else rest
                if not rest and i < len(tokens):
                    rest = tokens[i]
                    i += 1
                if letter == "o":
                    outputs.append(rest)
                flags.setdefault(f"-{letter}", []).append(rest)
                break
            continue
        words.append(token)
    return words, outputs, flags


def kubectl_forbidden(argv: list[str]) -> str | None:
    tokens = argv[1:]
    for token in tokens:
        flag = _identity_flag(token)
        if flag:
            return f"kubectl connection and identity flags ({flag}) are not allowed: tools act as their own read-only identity"
    words, outputs, flags = _scan(tokens)
    if not (words[:1] == ["explain"]):
        for output in [*outputs, *([""] if "--template" in flags and not outputs else [])]:
            reason = format_refusal(output or "", "--template" in flags)
            if reason:
                return reason
    for raw in flags.get("--raw", []):
        if raw is not None and "secret" in unquote(unquote(raw)).lower():
            return "reading Secrets through --raw is not allowed"
    if "config" in words and "view" in words and ("--raw" in flags or "--flatten" in flags):
        return "printing raw kubeconfig credentials is not allowed"
    if "create" in words and "token" in words:
        return "minting service account tokens is not allowed"
    data_output = any(o not in _SAFE_OUTPUTS for o in outputs) or any(
        f in flags for f in ("--template", "--sort-by", "--output-watch-events", "--raw")
    )
    unknown_objects = any(f in flags for f in ("-f", "--filename", "-k", "--kustomize")) or (
        # `xargs kubectl get -o yaml`: the kinds come from stdin
        (not words or words[0] == "get") and len(words) < 2 and "--raw" not in flags  # --raw: checked above
    )
    if data_output and (unknown_objects or any(_maybe_secret(w) for w in words)):
        return (
            "printing Secret data is not allowed (and `all`, comma lists and files may include Secrets); "
            "`kubectl get secrets` (table) and the kubectl_describe tool show names, types and key sizes"
        )
    return None


# --- unattended ------------------------------------------------------------------------------------

_READ_VERBS = {
    "get",
    "describe",
    "logs",
    "top",
    "events",
    "explain",
    "api-resources",
    "api-versions",
    "version",
    "cluster-info",
}
_READ_PAIRS = {("rollout", "status"), ("rollout", "history"), ("auth", "can-i"), ("auth", "whoami")}


def _output_check(value: str) -> str | None:
    if value.split("=", 1)[0].endswith("-file"):
        return "template files are read from the local disk"
    return None


def _operands(operands: list[str], _: ParsedArgs) -> str | None:
    if not operands:
        return "kubectl without a subcommand"
    verb = operands[0]
    pair = (verb, operands[1]) if len(operands) > 1 else None
    if verb not in _READ_VERBS and pair not in _READ_PAIRS:
        return f"`kubectl {verb}` is not a read-only kubectl command"
    if verb == "cluster-info" and "dump" in operands[1:]:
        return "`kubectl cluster-info dump` can write files"
    if any(o == "-" for o in operands):
        return "reading from stdin needs approval"
    return None


def _v(spellings: str, name: str, **kw: object) -> tuple[str, Opt]:
    return spellings, Opt(name, arity=1, **kw)  # type: ignore[arg-type]


def _s(spellings: str) -> tuple[str, Opt]:
    return spellings, Opt(spellings.split()[-1].lstrip("-"))


KUBECTL: Grammar = grammar(
    "kubectl",
    [
        _v("-n --namespace", "namespace"),
        _s("-A --all-namespaces"),
        _v("-o --output", "output", check=_output_check),
        _v("-l --selector", "selector"),
        _v("--field-selector", "field-selector"),
        _v("--sort-by", "sort-by"),
        _v("-L --label-columns", "label-columns"),
        _v("--template", "template"),
        _v("--request-timeout", "timeout"),
        _v("--chunk-size", "chunk-size"),
        _v("-c --container", "container"),
        _v("--tail", "tail"),
        _v("--since", "since"),
        _v("--since-time", "since-time"),
        _v("--max-log-requests", "max-log-requests"),
        _v("--limit-bytes", "limit-bytes"),
        _v("--pod-running-timeout", "pod-running-timeout"),
        _v("--types", "types"),
        _v("--for", "for"),
        _v("--api-version", "api-version"),
        _v("--api-group", "api-group"),
        _v("--revision", "revision"),
        _v("--timeout", "timeout"),
        _v("--subresource", "subresource"),
        _v("--verbs", "verbs"),
        _s("--show-labels"),
        _s("--show-kind"),
        _s("--no-headers"),
        _s("--ignore-not-found"),
        _s("--show-managed-fields"),
        _s("--timestamps"),
        _s("-p --previous"),
        _s("--prefix"),
        _s("--all-containers"),
        _s("--ignore-errors"),
        _s("--containers"),
        _s("--sum"),
        _s("--use-protocol-buffers"),
        _s("--recursive"),
        _s("--namespaced"),
        _s("--cached"),
        _s("--list"),
        _s("--show-events"),
        _s("--server-print"),
        _s("--allow-missing-template-keys"),
        _s("-h --help"),
    ],
    _operands,
    style="pflag",
)


def kubectl_read_only(argv: list[str]) -> str | None:
    words = _scan(argv[1:])[0]
    if words:  # name the verb first: that is the useful reason
        reason = _operands(words[:2], ParsedArgs())
        if reason:
            return reason
    try:
        parse_args(KUBECTL, argv[1:])
    except NotAllowed as exc:
        return str(exc)
    return None
