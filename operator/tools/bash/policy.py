"""Which parsed command lines may run unattended, which need a human, which never run.

Three answers, checked per pipeline stage:
- *forbidden*: never runs, approved or not — reading Secret data, raw kubeconfig credentials,
  minting tokens, kubectl connection and identity flags, and any argument that reaches a
  credential file (`bash_paths`). An approval cannot make these safe: the output goes to the
  model, or the operator's identity goes elsewhere.
- *read-only*: an allowlisted program whose every option and operand is on its grammar
  (`bash_grammar`; kubectl in `bash_kubectl`, the others in `bash_programs`): options not
  listed — abbreviated or not — and file operands need approval.
- anything else needs approval: unknown programs, writing kubectl verbs, redirections to
  files, and syntax only a shell can execute (which then fails with a clear error after
  approval instead of being approximated).

Filters that transform text (`rev`, `tr`, `cut -c`, `awk`, `jq`) could undo redaction if they
saw raw cluster data: `kubectl get pod -o yaml | rev` hides `DB_PASSWORD: x` from every text
rule. Decision: they stay unattended, and the runner redacts every stage's output before it
reaches the next stage (`bash.BashRunner`), so a filter only ever sees redacted text and there
is nothing left for it to unmask. Requiring approval instead would stop the jq/awk pipelines the
tool exists for, and would still rely on a human spotting an encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

from lestrade.operator.tools.bash.grammar import NotAllowed, parse_args
from lestrade.operator.tools.bash.kubectl import kubectl_forbidden, kubectl_read_only
from lestrade.operator.tools.bash.parse import BashParseError, CommandLine, Stage, parse_command
from lestrade.operator.tools.bash.paths import credential_path
from lestrade.operator.tools.bash.programs import GRAMMARS, TEXT_ONLY

__all__ = ["Verdict", "evaluate", "evaluate_text", "forbidden_reason"]


@dataclass(frozen=True)
class Verdict:
    read_only: bool  # may run without approval
    reason: str  # why approval is needed ("" when read-only)
    forbidden: str | None = None  # set: must never run

    @property
    def needs_approval(self) -> bool:
        return not self.read_only


def forbidden_reason(stage: Stage, depth: int = 0) -> str | None:
    """Why this stage must never run, or None.

    kubectl is also found behind wrappers a human might approve (`xargs kubectl get -o yaml`,
    `env kubectl ...`, `timeout 5 kubectl ...`), and inside command strings (`sh -c '...'`).
    """
    if not stage.argv:
        return None
    for arg in [stage.program, *stage.argv[1:], *(str(r.target) for r in stage.redirects)]:
        reached = credential_path(arg)
        if reached:
            return f"reading credential files ({reached}) is not allowed"
    for i, arg in enumerate(stage.argv):
        if arg.rsplit("/", 1)[-1] == "kubectl":
            reason = kubectl_forbidden(stage.argv[i:])
            if reason:
                return reason
        elif i and depth < 3 and ("kubectl" in arg or "/" in arg) and " " in arg.strip():
            reason = _nested_forbidden(arg, depth + 1)
            if reason:
                return reason
    return None


def _nested_forbidden(text: str, depth: int) -> str | None:
    """A forbidden command inside an argument that a shell could run (`sh -c '...'`)."""
    try:
        line = parse_command(text)
    except BashParseError:
        return None
    for stage in line.stages():
        reason = forbidden_reason(stage, depth)
        if reason:
            return reason
    return None


def _harmless_redirects(stage: Stage) -> bool:
    return all(
        (r.op == "dup" and r.fd in (1, 2) and r.target in (1, 2))
        or (r.op == ">" and r.fd == 2 and r.target == "/dev/null")
        for r in stage.redirects
    )


def _stage_reason(stage: Stage) -> str | None:
    program = stage.program
    if "/" in program:
        return f"`{program}` is given by path; only allowlisted programs by name run without approval"
    if program != "kubectl" and program not in GRAMMARS and program not in TEXT_ONLY:
        return f"`{program}` is not on the read-only allowlist"
    if not _harmless_redirects(stage):
        return "redirection to or from files needs approval"
    if stage.glob_args and program != "ls":
        # `grep x *.log` would expand into file arguments
        return "unquoted glob characters can expand to file names; quote them"
    if program == "kubectl":
        return kubectl_read_only(stage.argv)
    if program in TEXT_ONLY:
        return None
    try:
        parse_args(GRAMMARS[program], stage.argv[1:])
    except NotAllowed as exc:
        return str(exc)
    return None


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
