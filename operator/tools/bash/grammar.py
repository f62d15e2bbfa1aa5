"""Per-program option grammars: an allowlist of options, parsed the way the program parses them.

A denylist of option names fails as soon as a program accepts a spelling nobody listed: GNU
getopt takes any unambiguous prefix of a long option (`sort --compress-p=sh`), short options
cluster (`-rfo`), values attach (`-ofile`, `--opt=value`) or follow (`--opt value`). So each
program the bash tool may run unattended gets the complete list of options we accept, with their
arity, and everything else — including abbreviations of allowed options, which we never try to
resolve — is rejected. Operands are handed to the program's own check.

Two parsing styles cover our programs: `gnu` (getopt_long: `-o=x` gives the value `=x`) and
`pflag` (kubectl: `-o=x` gives `x`). Both permute: options may follow operands until `--`,
unless `options_end_at_operand` (awk: the program text ends the options).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["NotAllowed", "Opt", "Grammar", "ParsedArgs", "parse_args", "grammar"]


class NotAllowed(Exception):
    """The arguments use something the grammar does not allow unattended (message: why)."""


ValueCheck = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Opt:
    name: str  # canonical name, e.g. "output" for -o / --output
    arity: int = 0  # values taken: 0 (a switch), 1, or 2 (jq --arg NAME VALUE)
    optional_value: bool = False  # GNU `--color[=WHEN]`, `-I[FMT]`: only an attached value
    check: ValueCheck | None = None  # why a value needs approval, or None


@dataclass
class ParsedArgs:
    options: list[tuple[Opt, str | None]] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)

    def values(self, name: str) -> list[str | None]:
        return [value for opt, value in self.options if opt.name == name]

    def has(self, name: str) -> bool:
        return any(opt.name == name for opt, _ in self.options)


OperandCheck = Callable[[list[str], ParsedArgs], "str | None"]


def no_operands(program: str) -> OperandCheck:
    def check(operands: list[str], _: ParsedArgs) -> str | None:
        if any(o != "-" for o in operands):
            return f"`{program}` with file arguments reads files; it may only filter the previous command's output"
        return None

    return check


@dataclass(frozen=True)
class Grammar:
    program: str
    short: dict[str, Opt]
    long: dict[str, Opt]
    operands: OperandCheck
    style: str = "gnu"  # or "pflag"
    numeric_option: Opt | None = None  # `head -5`, `grep -3`
    options_end_at_operand: bool = False


def grammar(
    program: str,
    options: Iterable[tuple[str, Opt]],
    operands: OperandCheck | None = None,
    *,
    style: str = "gnu",
    numeric_option: Opt | None = None,
    options_end_at_operand: bool = False,
) -> Grammar:
    """Build a grammar from ("-n --lines", Opt(...)) pairs: every spelling listed maps to the option."""
    short: dict[str, Opt] = {}
    long: dict[str, Opt] = {}
    for spellings, opt in options:
        for spelling in spellings.split():
            if spelling.startswith("--"):
                long[spelling] = opt
            else:
                short[spelling[1:]] = opt
    return Grammar(
        program, short, long, operands or no_operands(program), style, numeric_option, options_end_at_operand
    )


def _check(g: Grammar, spelling: str, opt: Opt, value: str | None) -> None:
    if opt.check is not None and value is not None:
        reason = opt.check(value)
        if reason:
            raise NotAllowed(f"`{g.program} {spelling}`: {reason}")


def parse_args(g: Grammar, args: list[str]) -> ParsedArgs:
    """Parse `args` (argv without the program) or raise NotAllowed."""
    parsed = ParsedArgs()
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            parsed.operands += args[i:]
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            opt = g.long.get(name)
            if opt is None:
                raise NotAllowed(f"`{g.program} {name}` is not an option we allow without approval")
            if opt.arity == 0:
                if eq and not opt.optional_value and not (g.style == "pflag" and value in ("true", "false")):
                    raise NotAllowed(f"`{g.program} {name}` takes no value")
                parsed.options.append((opt, value if eq else None))
                _check(g, name, opt, value if eq else None)
                continue
            if eq and opt.arity == 2:
                raise NotAllowed(f"`{g.program} {name}` takes two separate values")
            if not eq:
                if i + opt.arity > len(args):
                    raise NotAllowed(f"`{g.program} {name}` is missing its value")
                value = args[i]
                i += opt.arity
            parsed.options.append((opt, value))
            _check(g, name, opt, value)
            continue
        if arg.startswith("-") and arg != "-":
            if g.numeric_option is not None and arg[1:].isdigit():
                parsed.options.append((g.numeric_option, arg[1:]))
                continue
            i = _short_cluster(g, arg, args, i, parsed)
            continue
        parsed.operands.append(arg)
        if g.options_end_at_operand:
            parsed.operands += args[i:]
            break
    reason = g.operands(parsed.operands, parsed)
    if reason:
        raise NotAllowed(reason)
    return parsed


def _short_cluster(g: Grammar, arg: str, args: list[str], i: int, parsed: ParsedArgs) -> int:
    """`-abc`, `-n5`, `-n 5`, `-o=x` (pflag): returns the index of the next argument."""
    j = 1
    while j < len(arg):
        letter = arg[j]
        opt = g.short.get(letter)
        if opt is None:
            raise NotAllowed(f"`{g.program} -{letter}` is not an option we allow without approval")
        rest = arg[j + 1 :]
        if opt.arity == 0:
            if opt.optional_value and rest:
                parsed.options.append((opt, rest))
                _check(g, f"-{letter}", opt, rest)
                return i
            parsed.options.append((opt, None))
            j += 1
            continue
        if opt.arity != 1:
            raise NotAllowed(f"`{g.program} -{letter}` takes several values")
        if g.style == "pflag" and rest.startswith("="):
            rest = rest[1:]
            value = rest
        elif rest:
            value = rest
        else:
            if i >= len(args):
                raise NotAllowed(f"`{g.program} -{letter}` is missing its value")
            value = args[i]
            i += 1
        parsed.options.append((opt, value))
        _check(g, f"-{letter}", opt, value)
        return i
    return i
