"""awk and jq programs read as tokens, not matched as text (issue 29).

A pattern over the program text cannot tell code from the inside of a string or a regex: a `;`,
`{` or `}` inside an awk string hid `print > "file"` from a rule that looked for `print ... >`
up to the next `;`, and jq's `$ ENV` (a blank after `$`) passed a rule that looked for `$ENV`.
So each program is split into tokens by a small lexer that knows strings, regex literals,
comments and (jq) string interpolation, and the checks look at tokens only. A program the lexer
cannot read (an unterminated string or regex) needs approval like any other unknown.
"""

from __future__ import annotations

import re

__all__ = ["awk_program_reason", "jq_program_reason"]

# --- awk -----------------------------------------------------------------------------------------

# `system`, `getline` (reads files and command output), ENVIRON/PROCINFO/SYMTAB/FUNCTAB (the
# environment; SYMTAB["ENVIRON"] reaches it too), ARGV/ARGC (a BEGIN block can add file
# operands), `close`/`fflush` (of pipes and files).
_AWK_FORBIDDEN = frozenset(
    {"system", "getline", "ENVIRON", "PROCINFO", "SYMTAB", "FUNCTAB", "ARGV", "ARGC", "close", "fflush"}
)
_AWK_TOKEN = re.compile(
    r"(?P<ws>[ \t\r]+|\\\n)|(?P<nl>\n)|(?P<comment>#[^\n]*)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<op>\|\||&&|\|&|>>|<=|>=|==|!=|\+\+|--|\+=|-=|\*=|/=|%=|\^=|\*\*=|\*\*|!~|[-+*/%^!<>|?:~$(){}\[\];,=@])"
)
# After these a `/` begins a regex, not a division.
_OPERAND_END = {"name", "number", "string", "regex", ")", "]", "$", "++", "--"}


def _awk_tokens(program: str) -> list[tuple[str, str]] | None:
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(program):
        ch = program[i]
        if ch == '"':
            j = i + 1
            while j < len(program) and program[j] != '"':
                if program[j] == "\n":
                    return None
                j += 2 if program[j] == "\\" else 1
            if j >= len(program):
                return None
            tokens.append(("string", program[i : j + 1]))
            i = j + 1
            continue
        last = tokens[-1][0] if tokens else None
        if ch == "/" and last not in _OPERAND_END:
            j, in_class = i + 1, False
            while j < len(program) and (in_class or program[j] != "/"):
                if program[j] == "\n":
                    return None
                if program[j] == "\\":
                    j += 1
                elif program[j] == "[":
                    in_class = True
                elif program[j] == "]":
                    in_class = False
                j += 1
            if j >= len(program):
                return None
            tokens.append(("regex", program[i : j + 1]))
            i = j + 1
            continue
        m = _AWK_TOKEN.match(program, i)
        if m is None:
            return None
        kind = m.lastgroup or ""
        if kind == "op":
            tokens.append((m.group(), m.group()))
        elif kind in ("name", "number"):
            tokens.append((kind, m.group()))
        elif kind == "nl":
            tokens.append(("nl", "\n"))
        i = m.end()
    return tokens


def awk_program_reason(program: str) -> str | None:
    """Why this awk program needs approval, or None when it only filters its input."""
    tokens = _awk_tokens(program)
    if tokens is None:
        return "an awk program this check cannot read (unterminated string or regex) needs approval"
    in_print, depth = False, 0
    for kind, text in tokens:
        if kind == "name" and text in _AWK_FORBIDDEN:
            return "awk programs that run commands, read files or the environment need approval"
        if kind == "@":
            return "gawk's indirect calls and directives (@) need approval"
        if kind in ("|", "|&"):
            return "awk output redirection or pipes need approval"
        if kind == "name" and text in ("print", "printf"):
            in_print, depth = True, 0
        elif kind in (";", "nl", "{", "}") and depth <= 0:
            in_print = False
        elif kind in ("(", "["):
            depth += 1
        elif kind in (")", "]"):
            depth -= 1
        elif in_print and depth <= 0 and kind in (">", ">>"):
            return "awk output redirection or pipes need approval"
    return None


# --- jq ------------------------------------------------------------------------------------------

_JQ_FORBIDDEN_NAMES = frozenset(
    {
        "env",
        "input_filename",
        "import",
        "include",
        "modulemeta",
        "get_search_list",
        "get_prog_origin",
        "get_jq_origin",
        "input_line_number",
        "splits_file",
    }
)
_JQ_FORBIDDEN_VARS = frozenset({"ENV", "__loc__", "__prog_args", "__prog_name"})
_JQ_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")


def _jq_scan(program: str, i: int, closing: str | None) -> tuple[list[tuple[str, str]], int] | None:
    """Tokens of names and variables from `i` up to `closing` (a `)` ending an interpolation)."""
    out: list[tuple[str, str]] = []
    depth = 0
    while i < len(program):
        ch = program[i]
        if ch == "#":
            nl = program.find("\n", i)
            i = len(program) if nl < 0 else nl
            continue
        if ch == '"':
            i += 1
            while i < len(program) and program[i] != '"':
                if program.startswith("\\(", i):
                    inner = _jq_scan(program, i + 2, ")")
                    if inner is None:
                        return None
                    out += inner[0]
                    i = inner[1]
                    continue
                i += 2 if program[i] == "\\" else 1
            if i >= len(program):
                return None
            i += 1
            continue
        if ch == "$":
            j = i + 1
            while j < len(program) and program[j] in " \t\r\n":
                j += 1
            m = _JQ_NAME.match(program, j)
            if m is None:
                return None
            out.append(("var", m.group()))
            i = m.end()
            continue
        m = _JQ_NAME.match(program, i)
        if m is not None:
            field = i > 0 and program[i - 1] == "." and not (i > 1 and program[i - 2] == ".")
            out.append(("field" if field else "name", m.group()))
            i = m.end()
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            if closing and depth == 0:
                return out, i + 1
            depth -= 1
        i += 1
    if closing:
        return None
    return out, i


def jq_program_reason(program: str) -> str | None:
    """Why this jq filter needs approval, or None when it only filters its input."""
    scanned = _jq_scan(program, 0, None)
    if scanned is None:
        return "a jq program this check cannot read needs approval"
    for kind, text in scanned[0]:
        if kind == "var" and text in _JQ_FORBIDDEN_VARS:
            return "jq programs that read the environment or files need approval"
        if kind == "name" and text.split("::")[0] in _JQ_FORBIDDEN_NAMES:
            return "jq programs that read the environment or files need approval"
        if kind == "name" and "::" in text:
            return "jq module references need approval"
    return None
