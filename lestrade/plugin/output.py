"""How the plugin prints: timeline items as lines, tables, `-o json|yaml`, a spinner while it
waits, a pager for long output.

Everything printed came from the cluster or from a model, so it may carry terminal escape
sequences meant to rewrite the screen, hide lines or set the window title: `clean` shows control
characters as visible escapes before anything reaches the terminal.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml

__all__ = ["clean", "item_lines", "table", "dump", "spinner", "page", "age", "pending_lines"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def clean(text: Any) -> str:
    """`text` with control characters (ANSI escapes, bidi overrides) made visible; newlines
    and tabs are kept."""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", str(text)
    )


def _params(params: Any, limit: int = 200) -> str:
    text = json.dumps(params, separators=(",", ":"), default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pending_lines(pending: list[dict[str, Any]]) -> list[str]:
    return [
        f"  {clean(p.get('toolCallId'))}: {clean(p.get('toolName'))} {clean(_params(p.get('params') or {}, 400))}"
        + (f"\n      {clean(p.get('description'))}" if p.get("description") else "")
        for p in pending
    ]


def item_lines(item: dict[str, Any], *, outputs: bool = False) -> list[str]:
    """The lines one timeline item prints as (`outputs`: tool outputs in full, for transcripts)."""
    kind = item["kind"]
    if kind == "turn":
        return [f"── turn {item['index'] + 1} ──"]
    if kind == "user":
        return [f"you: {clean(item['text'])}"]
    if kind == "assistant":
        return [f"model: {clean(item['text'])}"]
    if kind == "tool_call":
        head = f"→ {clean(item['name'])} {clean(_params(item['params']))}"
        lines = [head if item["status"] == "running" else f"{head}  [{clean(item['status'])}]"]
        if item.get("output") is not None:
            output = clean(item["output"])
            if outputs:
                lines += ["    " + line for line in output.splitlines() or [""]]
            else:
                lines.append(f"    ({len(item['output'])} characters of output)")
        return lines
    if kind == "approval":
        return ["⏸ waiting for approval:", *pending_lines(item["pending"])]
    if kind == "decision":
        verdict = "approved" if item["approved"] else "denied"
        return [f"✔ {clean(item['id'])} {verdict}" + (f": {clean(item['reason'])}" if item.get("reason") else "")]
    if kind == "tokens":
        return [
            f"  tokens +{item['totalTokens']} (prompt {item['promptTokens']}, completion "
            f"{item['completionTokens']}), ${item['cost']:.6f}"
        ]
    if kind == "compaction":
        return [f"  (history compacted to {item['messages']} messages)"]
    if kind == "answer":
        return ["", "== answer ==", clean(item["text"]), ""]
    if kind == "error":
        return [f"✗ failed ({clean(item['reason'])}): {clean(item['message'])}"]
    return []


def age(created: str | None, now: datetime | None = None) -> str:
    if not created:
        return "?"
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def table(rows: list[list[str]], headers: list[str]) -> str:
    cells = [headers, *[[clean(c).replace("\n", " ") for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def dump(value: Any, fmt: str, out: TextIO = sys.stdout) -> None:
    if fmt == "yaml":
        out.write(yaml.safe_dump(value, sort_keys=False, allow_unicode=True))
    else:
        out.write(json.dumps(value, indent=2, default=str) + "\n")


@asynccontextmanager
async def spinner(text: str, stream: TextIO = sys.stderr) -> AsyncIterator[None]:
    """A spinner on stderr while the body waits (only on a terminal: scripts see nothing)."""
    if not stream.isatty():
        yield
        return

    async def spin() -> None:
        frames = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
        index = 0
        while True:
            stream.write(f"\r{frames[index % len(frames)]} {text}")
            stream.flush()
            index += 1
            await asyncio.sleep(0.1)

    task = asyncio.create_task(spin())
    try:
        yield
    finally:
        task.cancel()
        stream.write("\r\x1b[K")
        stream.flush()


def page(text: str) -> None:
    """Through `$PAGER` (less) when stdout is a terminal and the text is longer than it."""
    height = shutil.get_terminal_size().lines
    pager = os.environ.get("PAGER", "less -R")
    if sys.stdout.isatty() and text.count("\n") > height and pager:
        try:
            subprocess.run(pager, shell=True, input=text.encode(), check=False)
            return
        except OSError:
            pass
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
