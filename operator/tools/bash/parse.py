"""Turn a command line into argv pipelines with bashlex — the bash tool never runs a shell.

The model writes shell syntax; we parse it and keep only what can be executed faithfully with
`exec` and pipes we wire ourselves: simple commands, `|` / `|&` pipelines, `;` `&&` `||`
sequences, file and fd redirections, and filename globs (expanded like bash, literal when
nothing matches). Everything that would need a real shell to mean the same thing — `$VAR`,
`$(...)`, `<(...)`, `~`, brace expansion, loops, subshells, functions, background jobs,
here-documents, `VAR=x cmd` — is recorded in `unsupported`, so the policy can demand approval
and the runner can refuse instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import bashlex.ast

__all__ = ["dequote", "BashParseError", "Redirect", "Stage", "Pipeline", "CommandLine", "parse_command"]


class BashParseError(ValueError):
    """The text is not a command line bashlex can read."""


@dataclass(frozen=True)
class Redirect:
    fd: int  # 0 stdin, 1 stdout, 2 stderr
    op: str  # "<", ">", ">>", "dup" (fd duplicated onto `target` fd)
    target: str | int


@dataclass
class Stage:
    argv: list[str]
    redirects: list[Redirect] = field(default_factory=list)
    glob_args: set[int] = field(default_factory=set)  # argv indices with unquoted glob characters

    @property
    def program(self) -> str:
        return self.argv[0] if self.argv else ""


@dataclass
class Pipeline:
    stages: list[Stage]
    stderr_piped: list[bool] = field(default_factory=list)  # `|&` after stage i


@dataclass
class CommandLine:
    pipelines: list[Pipeline]
    operators: list[str]  # between pipelines: ";", "&&", "||"
    unsupported: list[str]

    def stages(self) -> list[Stage]:
        return [s for p in self.pipelines for s in p.stages]


_GLOB = set("*?[")


def _scan_unquoted(raw: str) -> tuple[bool, bool]:
    """(has unquoted glob chars, has unquoted brace expansion) in a word's source text."""
    glob = False
    unquoted: list[str] = []
    quote = ""
    escaped = False
    for ch in raw:
        if escaped:
            escaped = False
            unquoted.append("_")
            continue
        if ch == "\\" and quote != "'":
            escaped = True
            continue
        if quote:
            if ch == quote:
                quote = ""
            unquoted.append("_")
            continue
        if ch in ("'", '"'):
            quote = ch
            continue
        if ch in _GLOB:
            glob = True
        unquoted.append(ch)
    text = "".join(unquoted)
    brace = bool(re.search(r"\{[^{}]*(,|\.\.)[^{}]*\}", text))
    return glob, brace


_DQ_ESCAPABLE = set('$`"\\\n')


def dequote(raw: str) -> str:
    """Bash quote removal for a word without expansions.

    bashlex drops the backslash in `"a\\nb"`, where bash keeps it (inside double quotes a
    backslash only escapes $ ` " \\ and newline), which would change what `printf` prints.
    """
    out: list[str] = []
    i, quote = 0, ""
    while i < len(raw):
        ch = raw[i]
        if quote == "'":
            if ch == "'":
                quote = ""
            else:
                out.append(ch)
        elif ch == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if quote == '"' and nxt not in _DQ_ESCAPABLE:
                out.append(ch)  # kept literally; `nxt` is handled on the next pass
            else:
                if nxt != "\n":  # backslash-newline is a line continuation
                    out.append(nxt)
                i += 1
        elif quote == '"':
            if ch == '"':
                quote = ""
            else:
                out.append(ch)
        elif ch in ("'", '"'):
            quote = ch
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def parse_command(text: str) -> CommandLine:
    """Parse `text`; raises BashParseError when bashlex cannot read it."""
    if not text or not text.strip():
        raise BashParseError("empty command")
    import bashlex  # at the first bash command: ~0.3 s of the operator's start otherwise

    try:
        nodes = bashlex.parse(text)
    except Exception as exc:  # bashlex raises ParsingError, NotImplementedError, and others
        raise BashParseError(f"cannot parse command: {exc}") from None
    line = CommandLine(pipelines=[], operators=[], unsupported=[])
    for i, node in enumerate(nodes):
        if i:
            line.operators.append(";")
        _top(node, text, line)
    if not line.pipelines:
        raise BashParseError("no command found")
    # a trailing `;` leaves one operator too many
    while len(line.operators) >= len(line.pipelines):
        line.operators.pop()
    return line


def _top(node: bashlex.ast.node, text: str, line: CommandLine) -> None:
    if node.kind == "list":
        expect_command = True
        for part in node.parts:
            if part.kind == "operator":
                if part.op == "&":
                    line.unsupported.append("background jobs (&)")
                    line.operators.append(";")
                elif part.op in (";", "&&", "||", "\n"):
                    line.operators.append(";" if part.op == "\n" else part.op)
                else:
                    line.unsupported.append(f"operator {part.op}")
                    line.operators.append(";")
                expect_command = True
            else:
                if not expect_command:
                    line.operators.append(";")
                _top(part, text, line)
                expect_command = False
        return
    if node.kind == "pipeline":
        line.pipelines.append(_pipeline(node, text, line))
        return
    if node.kind == "command":
        line.pipelines.append(Pipeline(stages=[_stage(node, text, line)], stderr_piped=[]))
        return
    line.unsupported.append(f"{node.kind} commands (subshells, loops, conditionals, functions)")
    line.pipelines.append(Pipeline(stages=[Stage(argv=[])]))


def _pipeline(node: bashlex.ast.node, text: str, line: CommandLine) -> Pipeline:
    pipeline = Pipeline(stages=[])
    for part in node.parts:
        if part.kind == "pipe":
            pipeline.stderr_piped.append(part.pipe == "|&")
        elif part.kind == "command":
            pipeline.stages.append(_stage(part, text, line))
        elif part.kind == "reservedword":
            line.unsupported.append(f"'{part.word}' in a pipeline")
        else:
            line.unsupported.append(f"{part.kind} commands (subshells, loops, conditionals, functions)")
            pipeline.stages.append(Stage(argv=[]))
    return pipeline


def _stage(node: bashlex.ast.node, text: str, line: CommandLine) -> Stage:
    stage = Stage(argv=[])
    for part in node.parts:
        if part.kind == "word":
            _check_word(part, text, line)
            raw = text[part.pos[0] : part.pos[1]]
            glob, brace = _scan_unquoted(raw)
            if brace:
                line.unsupported.append(f"brace expansion in {raw!r}")
            if glob:
                stage.glob_args.add(len(stage.argv))
            stage.argv.append(part.word if getattr(part, "parts", None) else dequote(raw))
        elif part.kind == "assignment":
            line.unsupported.append(f"variable assignment {part.word!r}")
        elif part.kind == "redirect":
            redirect = _redirect(part, text, line)
            if redirect:
                stage.redirects.append(redirect)
        else:
            line.unsupported.append(f"{part.kind} in a command")
    if not stage.argv:
        line.unsupported.append("a command without a program")
    return stage


def _check_word(word: bashlex.ast.node, text: str, line: CommandLine) -> None:
    for sub in getattr(word, "parts", []) or []:
        kind = sub.kind
        if kind == "parameter":
            line.unsupported.append(f"variable expansion ${sub.value}")
        elif kind == "commandsubstitution":
            line.unsupported.append("command substitution $(...)")
        elif kind == "processsubstitution":
            line.unsupported.append("process substitution <(...)")
        elif kind == "tilde":
            line.unsupported.append("tilde expansion ~")
        else:
            line.unsupported.append(f"{kind} expansion")


def _redirect(node: bashlex.ast.node, text: str, line: CommandLine) -> Redirect | None:
    rtype = node.type
    source_fd = node.input if isinstance(getattr(node, "input", None), int) else None
    target = node.output
    if getattr(node, "heredoc", None) is not None or rtype in ("<<", "<<-", "<<<"):
        line.unsupported.append("here-documents and here-strings")
        return None
    if isinstance(target, int):
        if rtype in (">&", "<&"):
            return Redirect(
                fd=source_fd if source_fd is not None else (1 if rtype == ">&" else 0), op="dup", target=target
            )
        line.unsupported.append(f"redirection {rtype}{target}")
        return None
    if target is None or target.kind != "word":
        line.unsupported.append(f"redirection {rtype}")
        return None
    _check_word(target, text, line)
    path = target.word if getattr(target, "parts", None) else dequote(text[target.pos[0] : target.pos[1]])
    if rtype == "<":
        return Redirect(fd=source_fd if source_fd is not None else 0, op="<", target=path)
    if rtype in (">", ">|"):
        return Redirect(fd=source_fd if source_fd is not None else 1, op=">", target=path)
    if rtype == ">>":
        return Redirect(fd=source_fd if source_fd is not None else 1, op=">>", target=path)
    if rtype in ("&>", ">&") and source_fd is None:
        # `&> file` and `>& file`: stdout and stderr to the same file; recorded as two redirects
        # by the runner (stderr duplicated onto stdout after stdout is opened).
        return Redirect(fd=-1, op=">", target=path)
    line.unsupported.append(f"redirection {rtype}")
    return None
