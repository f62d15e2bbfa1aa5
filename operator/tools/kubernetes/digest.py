"""Log digests that keep the evidence: what a model needs from a long log, in a fraction of its tokens.

A crash-looping Java service prints the same stack trace on every start and a sidecar prints the
same access line a thousand times; resent on every later model call, that repetition is most of
an investigation's tokens. A digest keeps what carries signal and counts the rest:

- the first occurrence of every line and of every multi-line block (a stack trace, a
  traceback) verbatim; later exact repeats are collapsed into a count with the first and last
  timestamps (`[×12, 10:01:02 … 10:14:40]`);
- lines that differ only in numbers, ids and addresses are clustered into a template; a template
  seen often keeps its first and last line verbatim and one line with the count;
- error and warning lines are never clustered (only exact repeats are counted), and the last
  lines before the end (the crash) are always kept verbatim.

Nothing is lost: the logs tools say a digest was made, and `raw=true` (with `tail`, `grep`) returns
the lines themselves. Pure functions, linear in the input; hostile text only ever becomes data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DIGEST_MIN_LINES", "digest_log"]

# Logs shorter than this are returned as they are: a digest would save little and cost clarity.
DIGEST_MIN_LINES = 80
# The lines before the end of a log are where a crash explains itself: always verbatim.
KEEP_TAIL = 25
# A template (a line with its variable parts masked) is clustered from this many occurrences on.
CLUSTER_FROM = 4

_TIMESTAMP = re.compile(r"^\s*\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)\]?\s*")
# Lines that continue the block above: a stack frame, a "Caused by", an indented line.
_CONTINUATION = re.compile(r"^(?:\s+\S|\s*at \S|\s*\.\.\. \d+ (?:more|common frames)|Caused by:|\s*File \")")
_SIGNAL = re.compile(
    r"(?i)\b(?:error|err|exception|fatal|panic|fail(?:ed|ure)?|warn(?:ing)?|killed|oom\w*|refused|denied"
    r"|timeout|timed out|unavailable|traceback|crash\w*|abort\w*|invalid|unauthori[sz]ed|forbidden)\b"
)
_VARIABLE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # uuid
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"  # IPv4[:port]
    r"|\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{12,}\b"  # hex ids
    r"|\d+(?:\.\d+)?"  # numbers
)


@dataclass
class _Block:
    """One log entry: a line and its continuation lines, seen `count` times."""

    lines: list[str]
    first_ts: str | None
    last_ts: str | None = None
    count: int = 1
    signal: bool = False
    template: str = ""
    clustered: int = 0  # for the first block of a template: how many later ones it stands for
    hidden: bool = False


def _split(line: str) -> tuple[str | None, str]:
    match = _TIMESTAMP.match(line)
    if not match:
        return None, line
    return match.group(1), line[match.end() :]


def _short(ts: str | None) -> str:
    if not ts:
        return "?"
    return ts[11:19] if len(ts) >= 19 else ts


def _blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    for line in lines:
        ts, body = _split(line)
        if blocks and ts is None and _CONTINUATION.match(line) and len(blocks[-1].lines) < 200:
            blocks[-1].lines.append(line)
            continue
        blocks.append(_Block(lines=[line], first_ts=ts))
    return blocks


def digest_log(text: str, *, keep_tail: int = KEEP_TAIL, min_lines: int = DIGEST_MIN_LINES) -> str:
    """`text` with repeats collapsed and templates clustered; unchanged when it is short or the
    digest would not be smaller."""
    lines = text.split("\n")
    if len(lines) < min_lines:
        return text
    cut = max(0, len(lines) - keep_tail)
    # The kept tail starts with a whole entry: a stack trace cut in two would read as two.
    floor = max(0, cut - 200)
    while cut > floor and _split(lines[cut])[0] is None and _CONTINUATION.match(lines[cut]):
        cut -= 1
    head, tail = lines[:cut], lines[cut:]
    blocks = _blocks(head)

    # Exact repeats (timestamps aside) fold into their first occurrence.
    first_of: dict[str, _Block] = {}
    kept: list[_Block] = []
    for block in blocks:
        key = "\n".join(_split(line)[1] for line in block.lines)
        seen = first_of.get(key)
        if seen is not None:
            seen.count += 1
            seen.last_ts = block.first_ts or seen.last_ts
            continue
        first_of[key] = block
        block.signal = any(_SIGNAL.search(line) for line in block.lines)
        block.template = _VARIABLE.sub("<*>", key) if len(block.lines) == 1 else ""
        kept.append(block)

    # Single lines that differ only in their variable parts: keep the first and the last.
    by_template: dict[str, list[int]] = {}
    for index, block in enumerate(kept):
        if block.template and not block.signal:
            by_template.setdefault(block.template, []).append(index)
    for indexes in by_template.values():
        if len(indexes) < CLUSTER_FROM:
            continue
        middle = indexes[1:-1]
        kept[indexes[0]].clustered = sum(kept[i].count for i in middle)
        for i in middle:
            kept[i].hidden = True

    out: list[str] = []
    for block in kept:
        if block.hidden:
            continue
        out.extend(block.lines)
        notes = []
        if block.count > 1:
            span = f", {_short(block.first_ts)} … {_short(block.last_ts)}" if block.first_ts else ""
            what = f"these {len(block.lines)} lines" if len(block.lines) > 1 else "this line"
            notes.append(f"[×{block.count}{span}: {what} repeated]")
        if block.clustered:
            notes.append(f"[{block.clustered} more lines like this: {block.template[:160]}]")
        out.extend(notes)
    out.extend(tail)
    if len(out) >= len(lines):
        return text
    header = (
        f"[log digest: {len(lines)} lines shown as {len(out)}; repeated lines and blocks are "
        f"counted, errors and the last {len(tail)} lines are verbatim; raw=true for the raw lines]"
    )
    return header + "\n" + "\n".join(out)
