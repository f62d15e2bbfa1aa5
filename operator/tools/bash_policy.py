"""Which parsed command lines may run unattended, which need a human, which never run.

Three answers, checked per pipeline stage:
- *forbidden*: never runs, approved or not — reading Secret data (`kubectl get secret -o yaml`),
  raw kubeconfig credentials, minting tokens, the pod's own service-account token. An approval
  cannot make these safe because the output goes to the model.
- *read-only*: an allowlisted program with arguments we have checked cannot write, execute
  other programs, follow forever, or read files (the operator pod holds credentials in files and
  env vars; the filters only read their stdin).
- anything else needs approval: unknown programs, writing kubectl verbs, file arguments,
  redirections to files, and syntax only a shell can execute (which then fails with a clear
  error after approval instead of being approximated).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lestrade.operator.tools.bash_parse import BashParseError, CommandLine, Stage, parse_command

__all__ = ["Verdict", "evaluate", "evaluate_text", "forbidden_reason"]


@dataclass(frozen=True)
class Verdict:
    read_only: bool  # may run without approval
    reason: str  # why approval is needed ("" when read-only)
    forbidden: str | None = None  # set: must never run

    @property
    def needs_approval(self) -> bool:
        return not self.read_only


# --- kubectl -------------------------------------------------------------------------------------

_KUBECTL_VALUE_FLAGS = {
    "-n", "--namespace", "--context", "--cluster", "--user", "--kubeconfig", "-l", "--selector",
    "-o", "--output", "-c", "--container", "--field-selector", "--sort-by", "--tail", "--since",
    "--since-time", "-L", "--label-columns", "--template", "--request-timeout", "-s", "--server",
    "--token", "--as", "--as-group", "--as-uid", "--chunk-size", "--limit-bytes",
    "--max-log-requests", "--for", "--types", "--certificate-authority", "--client-certificate",
    "--client-key", "--tls-server-name", "--cache-dir", "--pod-running-timeout", "--profile",
    "--subresource", "--raw", "--timeout", "-f", "--filename", "-k", "--kustomize", "--revision",
    "--api-group", "--api-version", "--resource-version", "-v", "--v", "--log-flush-frequency",
    "--password", "--username", "--selector", "--output-watch-events",
}
_KUBECTL_READ = {"get", "describe", "logs", "top", "events", "explain", "api-resources", "api-versions", "version", "cluster-info"}
_KUBECTL_READ_PAIRS = {("rollout", "status"), ("rollout", "history"), ("auth", "can-i"), ("auth", "whoami")}
_KUBECTL_NEVER_READ_ONLY_FLAGS = {"-f", "--filename", "-k", "--kustomize", "-w", "--watch", "--watch-only",
                                  "--follow", "--raw", "-i", "--stdin", "-t", "--tty"}
_SECRET_SAFE_OUTPUTS = {None, "wide", "name"}


@dataclass
class _KubectlArgs:
    positionals: list[str]
    flags: dict[str, str | None]  # flag → value (last wins); None for boolean flags


def _parse_kubectl(argv: list[str]) -> _KubectlArgs:
    positionals: list[str] = []
    flags: dict[str, str | None] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            positionals += argv[i + 1 :]
            break
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
            flags[name] = value
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            flags["-o"] = arg[2:].lstrip("=")
        elif re.fullmatch(r"-[nlcLs].+", arg):
            flags[arg[:2]] = arg[2:].lstrip("=")
        elif arg in _KUBECTL_VALUE_FLAGS:
            flags[arg] = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        elif arg.startswith("-"):
            flags[arg] = None
        else:
            positionals.append(arg)
        i += 1
    return _KubectlArgs(positionals, flags)


def _output_format(args: _KubectlArgs) -> str | None:
    if "--template" in args.flags:
        return "go-template"
    value = args.flags.get("-o", args.flags.get("--output"))
    if value is None:
        return None
    return value.split("=", 1)[0].lower()


def _names_secrets(token: str) -> bool:
    """`secret`, `secrets/db`, `cm,secrets`, `secrets.v1`: any spelling of the Secret kind."""
    return any(item.split("/", 1)[0].split(".", 1)[0].lower() in ("secret", "secrets") for item in token.split(","))


def _kubectl_forbidden(argv: list[str]) -> str | None:
    args = _parse_kubectl(argv)
    pos = args.positionals
    verb = pos[0] if pos else ""
    raw = args.flags.get("--raw")
    if raw is not None and "secrets" in raw.lower():
        return "reading Secrets through --raw is not allowed"
    if verb == "config" and len(pos) > 1 and pos[1] == "view" and ("--raw" in args.flags or "--flatten" in args.flags):
        return "printing raw kubeconfig credentials is not allowed"
    if verb == "create" and len(pos) > 1 and pos[1] == "token":
        return "minting service account tokens is not allowed"
    if verb == "get" and any(_names_secrets(p) for p in pos[1:]) and _output_format(args) not in _SECRET_SAFE_OUTPUTS:
        return (
            "printing Secret data is not allowed; `kubectl get secrets` (table) and the "
            "kubectl_describe tool show names, types and key sizes"
        )
    return None


def _kubectl_read_only(argv: list[str]) -> str | None:
    args = _parse_kubectl(argv)
    pos = args.positionals
    if not pos:
        return "kubectl without a subcommand"
    verb = pos[0]
    pair = (verb, pos[1]) if len(pos) > 1 else None
    if verb not in _KUBECTL_READ and pair not in _KUBECTL_READ_PAIRS:
        return f"`kubectl {verb}` is not a read-only kubectl command"
    if verb == "cluster-info" and "dump" in pos[1:]:
        return "`kubectl cluster-info dump` can write files"
    blocked = sorted(f for f in args.flags if f in _KUBECTL_NEVER_READ_ONLY_FLAGS)
    if blocked:
        return f"kubectl flag {blocked[0]} is not allowed without approval"
    return None


# --- filters -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FilterRule:
    value_flags: frozenset[str] = frozenset()
    denied_flags: frozenset[str] = frozenset()
    max_operands: int = 0  # positional arguments that are not files (patterns, programs, sets)


_FILTERS: dict[str, _FilterRule] = {
    "cat": _FilterRule(),
    "head": _FilterRule(frozenset({"-n", "-c", "--lines", "--bytes"})),
    "tail": _FilterRule(frozenset({"-n", "-c", "--lines", "--bytes"}), frozenset({"-f", "-F", "--follow", "--retry", "--pid"})),
    "wc": _FilterRule(denied_flags=frozenset({"--files0-from"})),
    "sort": _FilterRule(frozenset({"-k", "--key", "-t", "--field-separator", "-S", "--buffer-size"}),
                        frozenset({"-o", "--output", "-T", "--temporary-directory", "--compress-program", "--files0-from"})),
    "uniq": _FilterRule(frozenset({"-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"})),
    "cut": _FilterRule(frozenset({"-d", "-f", "-c", "-b", "--delimiter", "--fields", "--characters", "--bytes", "--output-delimiter"})),
    "tr": _FilterRule(max_operands=2),
    "column": _FilterRule(frozenset({"-s", "-c", "-o", "-N", "-R", "-H", "--separator", "--output-separator"})),
    "nl": _FilterRule(frozenset({"-b", "-s", "-w", "-n", "-v", "-i"})),
    "rev": _FilterRule(),
    "tac": _FilterRule(),
    "grep": _FilterRule(frozenset({"-e", "-m", "-A", "-B", "-C", "--regexp", "--max-count", "--context",
                                   "--after-context", "--before-context", "--label"}),
                        frozenset({"-f", "--file", "-r", "-R", "--recursive", "--dereference-recursive", "-d",
                                   "--directories", "-D", "--devices", "--include", "--exclude", "--exclude-from"}),
                        max_operands=1),
    "jq": _FilterRule(frozenset({"--indent", "--arg", "--argjson"}),
                      frozenset({"-f", "--from-file", "--rawfile", "--slurpfile", "-L", "--args", "--jsonargs"}),
                      max_operands=1),
    "awk": _FilterRule(frozenset({"-F", "-v", "--field-separator", "--assign"}),
                       frozenset({"-f", "--file", "-i", "--include", "-l", "--load", "-E", "--exec"}),
                       max_operands=1),
}
for _alias, _base in (("egrep", "grep"), ("fgrep", "grep"), ("gawk", "awk"), ("mawk", "awk")):
    _FILTERS[_alias] = _FILTERS[_base]
_TWO_VALUE_FLAGS = {"--arg", "--argjson"}


def _filter_read_only(argv: list[str]) -> str | None:
    program = argv[0]
    rule = _FILTERS[program]
    operands: list[str] = []
    has_pattern_flag = False
    i = 1
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            operands += argv[i:]
            break
        if arg == "-" or not arg.startswith("-"):
            operands.append(arg)
            continue
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            if name in rule.denied_flags:
                return f"`{program} {name}` is not allowed without approval"
            has_pattern_flag |= name == "--regexp"
            if name in _TWO_VALUE_FLAGS:
                i += 2
            elif name in rule.value_flags and "=" not in arg:
                i += 1
            continue
        # a group of short flags, e.g. -rn, -A3, -F:, -n 5
        for pos, letter in enumerate(arg[1:], start=1):
            flag = f"-{letter}"
            if flag in rule.denied_flags:
                return f"`{program} {flag}` is not allowed without approval"
            has_pattern_flag |= flag == "-e"
            if flag in rule.value_flags:
                if pos == len(arg) - 1:
                    i += 1  # the value is the next argument
                break
    if program in ("awk", "gawk", "mawk"):
        operands = [o for o in operands if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", o)]
    allowed = rule.max_operands
    if has_pattern_flag and program in ("grep", "egrep", "fgrep"):
        allowed = 0
    if len(operands) > allowed:
        return f"`{program}` with file arguments reads files; it may only filter the previous command's output"
    script = operands[0] if operands and allowed else ""
    if program in ("awk", "gawk", "mawk"):
        return _awk_reason(script)
    if program == "jq":
        return _jq_reason(script)
    return None


def _awk_reason(program: str) -> str | None:
    if re.search(r"\b(system|getline|ENVIRON|PROCINFO)\b|@load|@include", program):
        return "awk programs that run commands, read files or the environment need approval"
    if re.search(r"(?<!\|)\|(?!\|)", program) or re.search(r"\bprintf?\b[^;{}]*>", program):
        return "awk output redirection or pipes need approval"
    return None


def _jq_reason(program: str) -> str | None:
    if re.search(r"\$ENV\b|\benv\b|\binput_filename\b|\b(import|include)\b|\$__prog", program):
        return "jq programs that read the environment or files need approval"
    return None


# --- other read-only programs --------------------------------------------------------------------


def _date_read_only(argv: list[str]) -> str | None:
    if any(a in ("-s", "--set", "-f", "--file") or a.startswith(("--set=", "--file=")) for a in argv[1:]):
        return "date -s/-f needs approval"
    return None


_READ_ONLY: dict[str, Callable[[list[str]], str | None]] = {
    "kubectl": _kubectl_read_only,
    "echo": lambda argv: None,
    "printf": lambda argv: None,
    "true": lambda argv: None,
    "false": lambda argv: None,
    "ls": lambda argv: None,
    "date": _date_read_only,
    **{name: _filter_read_only for name in _FILTERS},
}

_SENSITIVE_PATHS = re.compile(r"/var/run/secrets|/run/secrets|serviceaccount/token|\.kube/config|/etc/shadow")


def forbidden_reason(stage: Stage) -> str | None:
    """Why this stage must never run, or None."""
    if not stage.argv:
        return None
    for arg in stage.argv[1:] + [str(r.target) for r in stage.redirects]:
        if _SENSITIVE_PATHS.search(arg):
            return f"reading credential files ({arg}) is not allowed"
    if stage.program.rsplit("/", 1)[-1] == "kubectl":
        return _kubectl_forbidden(stage.argv)
    return None


def _stage_reason(stage: Stage) -> str | None:
    program = stage.program
    if "/" in program:
        return f"`{program}` is given by path; only allowlisted programs by name run without approval"
    check = _READ_ONLY.get(program)
    if check is None:
        return f"`{program}` is not on the read-only allowlist"
    for redirect in stage.redirects:
        harmless = (redirect.op == "dup" and redirect.fd in (1, 2) and redirect.target in (1, 2)) or (
            redirect.op == ">" and redirect.fd == 2 and redirect.target == "/dev/null"
        )
        if not harmless:
            return "redirection to or from files needs approval"
    if stage.glob_args and program in _FILTERS:
        # `grep *.log` would expand into file arguments
        return "unquoted glob characters in a filter's arguments can expand to file names; quote them"
    return check(stage.argv)


def evaluate(line: CommandLine) -> Verdict:
    for stage in line.stages():
        reason = forbidden_reason(stage)
        if reason:
            return Verdict(read_only=False, reason=reason, forbidden=reason)
    if line.unsupported:
        return Verdict(read_only=False, reason=f"needs a shell: {line.unsupported[0]}")
    for pipeline in line.pipelines:
        for stage in pipeline.stages:
            reason = _stage_reason(stage)
            if reason:
                return Verdict(read_only=False, reason=reason)
    return Verdict(read_only=True, reason="")


def evaluate_text(command: str) -> tuple[CommandLine | None, Verdict]:
    """Parse and judge; an unparseable command needs approval (and will then be refused)."""
    try:
        line = parse_command(command)
    except BashParseError as exc:
        return None, Verdict(read_only=False, reason=str(exc))
    return line, evaluate(line)
