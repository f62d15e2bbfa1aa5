"""The grammars of the programs (other than kubectl) that the bash tool runs without approval.

Filters only read the previous command's output: no file operands, and none of the options
that read or write files (`sort -o/-T/--compress-program`, `grep -f/-r`, `jq --rawfile`,
`awk -f`, `date -f/-r/-s`, `tail -f`...). Those are not listed, so they need approval however
they are spelled. awk and jq programs are checked too: they can read the environment, files
or (awk) run commands.
"""

from __future__ import annotations

import re

from lestrade.operator.tools.bash.awkjq import awk_program_reason, jq_program_reason
from lestrade.operator.tools.bash.grammar import Grammar, Opt, ParsedArgs, grammar

__all__ = ["GRAMMARS", "FILTERS", "TEXT_ONLY"]


def _switches(*spellings: str) -> list[tuple[str, Opt]]:
    """Each argument is the spellings of one switch, e.g. "-n --number"."""
    return [(s, Opt(s.split()[-1].lstrip("-"))) for s in spellings]


def _values(*spellings: str) -> list[tuple[str, Opt]]:
    return [(s, Opt(s.split()[-1].lstrip("-"), arity=1)) for s in spellings]


_COUNT = Opt("count", arity=1)

# --- awk -----------------------------------------------------------------------------------------

_AWK_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_AWK_SPECIAL = re.compile(r"(ENVIRON|PROCINFO|SYMTAB|FUNCTAB|ARGV|ARGC)=")


def _awk_program(operands: list[str], _: ParsedArgs) -> str | None:
    if len(operands) != 1:
        # more operands are files or `var=value` assignments; both are read by awk, not us
        return "`awk` with operands after the program reads files; it may only filter the previous command's output"
    return awk_program_reason(operands[0])  # tokens, not text (`bash.awkjq`)


def _awk_assignment(value: str) -> str | None:
    if not _AWK_ASSIGNMENT.match(value):
        return "not a `name=value` assignment"
    if _AWK_SPECIAL.match(value):
        return "assigns a special variable"
    return None


# --- jq ------------------------------------------------------------------------------------------


def _jq_program(operands: list[str], _: ParsedArgs) -> str | None:
    if len(operands) > 1:
        return "`jq` with file arguments reads files; it may only filter the previous command's output"
    return jq_program_reason(operands[0]) if operands else None


# --- grep, tr, date, ls, echo ---------------------------------------------------------------------


def _grep_operands(operands: list[str], parsed: ParsedArgs) -> str | None:
    allowed = 0 if parsed.has("regexp") else 1
    if len(operands) > allowed:
        return "`grep` with file arguments reads files; it may only filter the previous command's output"
    return None


def _tr_operands(operands: list[str], _: ParsedArgs) -> str | None:
    return None if 1 <= len(operands) <= 2 else "`tr` takes one or two sets"


def _date_operands(operands: list[str], _: ParsedArgs) -> str | None:
    # `date MMDDhhmm` sets the clock; only a +FORMAT operand reads it
    if len(operands) > 1 or any(not o.startswith("+") for o in operands):
        return "`date` operands other than +FORMAT need approval"
    return None


def _any_operands(operands: list[str], _: ParsedArgs) -> str | None:
    return None  # paths are checked by the credential-path rule; names are only listed


_FILTER_GRAMMARS: list[Grammar] = [
    grammar(
        "cat",
        _switches(
            "-A --show-all",
            "-b --number-nonblank",
            "-e",
            "-E --show-ends",
            "-n --number",
            "-s --squeeze-blank",
            "-t",
            "-T --show-tabs",
            "-u",
            "-v --show-nonprinting",
        ),
    ),
    grammar(
        "head",
        [
            *_values("-c --bytes", "-n --lines"),
            *_switches("-q --quiet --silent", "-v --verbose", "-z --zero-terminated"),
        ],
        numeric_option=_COUNT,
    ),
    grammar(
        "tail",
        [
            *_values("-c --bytes", "-n --lines"),
            *_switches("-q --quiet --silent", "-v --verbose", "-z --zero-terminated"),
        ],
        numeric_option=_COUNT,
    ),
    grammar("wc", _switches("-c --bytes", "-m --chars", "-l --lines", "-L --max-line-length", "-w --words")),
    grammar(
        "sort",
        [
            *_switches(
                "-b --ignore-leading-blanks",
                "-d --dictionary-order",
                "-f --ignore-case",
                "-g --general-numeric-sort",
                "-i --ignore-nonprinting",
                "-M --month-sort",
                "-h --human-numeric-sort",
                "-n --numeric-sort",
                "-R --random-sort",
                "-r --reverse",
                "-V --version-sort",
                "-c --check",
                "-C",
                "-s --stable",
                "-u --unique",
                "-z --zero-terminated",
            ),
            *_values("-k --key", "-t --field-separator", "-S --buffer-size", "--parallel"),
        ],
    ),
    grammar(
        "uniq",
        [
            *_switches("-c --count", "-d --repeated", "-D", "-i --ignore-case", "-u --unique", "-z --zero-terminated"),
            *_values("-f --skip-fields", "-s --skip-chars", "-w --check-chars"),
        ],
    ),
    grammar(
        "cut",
        [
            *_switches("-n", "-s --only-delimited", "-z --zero-terminated", "--complement"),
            *_values("-b --bytes", "-c --characters", "-d --delimiter", "-f --fields", "--output-delimiter"),
        ],
    ),
    grammar(
        "tr", _switches("-c -C --complement", "-d --delete", "-s --squeeze-repeats", "-t --truncate-set1"), _tr_operands
    ),
    grammar(
        "column",
        [
            *_switches("-t --table", "-x --fillrows", "-J --json", "-n"),
            *_values(
                "-s --separator",
                "-o --output-separator",
                "-c --output-width",
                "-N --table-columns",
                "-R --table-right",
                "-H --table-hide",
            ),
        ],
    ),
    grammar(
        "nl",
        [
            *_switches("-p --no-renumber"),
            *_values(
                "-b --body-numbering",
                "-d --section-delimiter",
                "-f --footer-numbering",
                "-h --header-numbering",
                "-i --line-increment",
                "-l --join-blank-lines",
                "-n --number-format",
                "-s --number-separator",
                "-v --starting-line-number",
                "-w --number-width",
            ),
        ],
    ),
    grammar("rev", []),
    grammar("tac", [*_switches("-b --before", "-r --regex"), *_values("-s --separator")]),
    grammar(
        "grep",
        [
            *_switches(
                "-E --extended-regexp",
                "-F --fixed-strings",
                "-G --basic-regexp",
                "-P --perl-regexp",
                "-i -y --ignore-case",
                "--no-ignore-case",
                "-v --invert-match",
                "-w --word-regexp",
                "-x --line-regexp",
                "-c --count",
                "-o --only-matching",
                "-q --quiet --silent",
                "-s --no-messages",
                "-b --byte-offset",
                "-H --with-filename",
                "-h --no-filename",
                "-n --line-number",
                "-T --initial-tab",
                "-Z --null",
                "-z --null-data",
                "-a --text",
                "-I",
                "-U --binary",
                "--line-buffered",
            ),
            ("--color --colour", Opt("color", optional_value=True)),
            *_values("-m --max-count", "-A --after-context", "-B --before-context", "-C --context", "--label"),
            ("-e --regexp", Opt("regexp", arity=1)),
        ],
        _grep_operands,
        numeric_option=_COUNT,
    ),
    grammar(
        "jq",
        [
            *_switches(
                "-r --raw-output",
                "-j --join-output",
                "-c --compact-output",
                "-s --slurp",
                "-n --null-input",
                "-e --exit-status",
                "-S --sort-keys",
                "-C --color-output",
                "-M --monochrome-output",
                "-a --ascii-output",
                "-R --raw-input",
                "--tab",
                "--seq",
                "--stream",
            ),
            *_values("--indent"),
            ("--arg --argjson", Opt("arg", arity=2)),
        ],
        _jq_program,
    ),
    grammar(
        "awk",
        [("-F", Opt("field-separator", arity=1)), ("-v", Opt("assign", arity=1, check=_awk_assignment))],
        _awk_program,
        options_end_at_operand=True,
    ),
]

FILTERS: dict[str, Grammar] = {g.program: g for g in _FILTER_GRAMMARS}
for _alias, _base in (("egrep", "grep"), ("fgrep", "grep"), ("gawk", "awk"), ("mawk", "awk")):
    FILTERS[_alias] = FILTERS[_base]

GRAMMARS: dict[str, Grammar] = {
    **FILTERS,
    "date": grammar(
        "date",
        [
            *_switches("-u --utc --universal", "-R --rfc-email"),
            *_values("-d --date", "--rfc-3339"),
            ("-I --iso-8601", Opt("iso-8601", optional_value=True)),
        ],
        _date_operands,
    ),
    "ls": grammar(
        "ls",
        _switches(
            "-1",
            "-a --all",
            "-A --almost-all",
            "-d --directory",
            "-F --classify",
            "-h --human-readable",
            "-i --inode",
            "-l",
            "-n --numeric-uid-gid",
            "-r --reverse",
            "-R --recursive",
            "-S",
            "-t",
        ),
        _any_operands,
    ),
}

# Programs that take no options we care about and never read files: every argument is text.
TEXT_ONLY = frozenset({"echo", "printf", "true", "false"})
