"""Text rendering that reads like kubectl: ages, aligned tables, server-side Table output.

Models have read a great deal of kubectl output, so the tools print the same shapes (`kubectl get
-o wide` tables, `kubectl events` lines) rather than JSON; it is also far fewer tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

__all__ = [
    "MAX_ROWS",
    "age",
    "parse_time",
    "render_table",
    "server_table_rows",
    "format_labels",
    "event_time",
    "events_table",
    "sort_events",
    "human_duration",
    "format_cpu",
    "format_memory",
    "quantity",
]

MAX_ROWS = 200
CELL_LIMIT = 200
EVENT_MESSAGE_LIMIT = 1000


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(value: str | datetime | None, now: datetime | None = None) -> str:
    """kubectl's short human duration since `value` (`45s`, `3m12s`, `5h`, `12d`)."""
    then = parse_time(value) if isinstance(value, str) or value is None else value
    if then is None:
        return "<unknown>"
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    return human_duration(seconds)


def human_duration(seconds: int) -> str:
    if seconds < 0:
        seconds = 0
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d"


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    max_rows: int = MAX_ROWS,
    last_cell_limit: int = CELL_LIMIT,
) -> str:
    """Left-aligned columns separated by three spaces, like kubectl's printer. The last column
    may be given more room (Event messages: their cause is often at the end)."""
    shown = [
        [_cell(c, last_cell_limit if i == len(row) - 1 else CELL_LIMIT) for i, c in enumerate(row)]
        for row in rows[:max_rows]
    ]
    widths = [len(h) for h in headers]
    for row in shown:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["   ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    for row in shown:
        lines.append("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    if len(rows) > max_rows:
        lines.append(f"[... {len(rows) - max_rows} more rows not shown; filter by namespace or name]")
    return "\n".join(lines)


def _cell(value: Any, limit: int = CELL_LIMIT) -> str:
    if value is None or value == "":
        return "<none>"
    if isinstance(value, bool):
        return str(value).lower()
    text = str(value).replace("\n", " ")
    if len(text) <= limit:
        return text
    # keep both ends: an error's context is at the start, its cause usually at the end
    head = limit // 3
    return text[:head] + " ... " + text[-(limit - head - 5) :]


def format_labels(labels: dict[str, str] | None) -> str:
    if not labels:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def server_table_rows(
    table: dict[str, Any], *, wide: bool = True, with_namespace: bool = False, with_labels: bool = False
) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of a meta.k8s.io Table, as `kubectl get [-A] [-o wide] [--show-labels]`."""
    columns = table.get("columnDefinitions") or []
    keep = [i for i, c in enumerate(columns) if wide or int(c.get("priority", 0)) == 0]
    headers = [str(columns[i]["name"]).upper() for i in keep]
    rows: list[list[Any]] = []
    for row in table.get("rows") or []:
        cells = row.get("cells") or []
        meta = (row.get("object") or {}).get("metadata") or {}
        out = [cells[i] if i < len(cells) else "" for i in keep]
        if with_namespace:
            out.insert(0, meta.get("namespace", ""))
        if with_labels:
            out.append(format_labels(meta.get("labels")))
        rows.append(out)
    if with_namespace:
        headers.insert(0, "NAMESPACE")
    if with_labels:
        headers.append("LABELS")
    return headers, rows


def event_time(event: dict[str, Any]) -> datetime | None:
    """The most recent time an event was seen, across the old and new event fields."""
    series = event.get("series") or {}
    for value in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        parsed = parse_time(value)
        if parsed:
            return parsed
    return None


def _event_count(event: dict[str, Any]) -> int:
    series = event.get("series") or {}
    return int(series.get("count") or event.get("count") or 1)


def _event_age(event: dict[str, Any], now: datetime) -> str:
    last = event_time(event)
    text = age(last, now) if last else "<unknown>"
    count = _event_count(event)
    if count > 1:
        first = parse_time(event.get("firstTimestamp")) or parse_time(event.get("eventTime"))
        over = age(first, now) if first else text
        text = f"{text} (x{count} over {over})"
    return text


def sort_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    floor = datetime.min.replace(tzinfo=UTC)
    return sorted(events, key=lambda e: event_time(e) or floor)


def events_table(
    events: list[dict[str, Any]],
    *,
    with_object: bool = True,
    with_namespace: bool = False,
    limit: int = 100,
    indent: str = "",
) -> str:
    """Oldest first, newest last (what matters most ends up nearest the model's next turn).

    Over `limit`, the oldest Normal events go first: a Warning is what an investigation looks
    for, and a noisy workload's routine events must not push it out of view."""
    now = datetime.now(UTC)
    ordered = sort_events(events)
    dropped = max(0, len(ordered) - limit)
    if dropped:
        normal = [i for i, e in enumerate(ordered) if e.get("type") != "Warning"]
        gone = set(normal[:dropped])
        gone |= set([i for i in range(len(ordered)) if i not in gone][: dropped - len(gone)])
        dropped_normal = sum(1 for i in gone if ordered[i].get("type") != "Warning")
        ordered = [e for i, e in enumerate(ordered) if i not in gone]
    headers = ["LAST SEEN", "TYPE", "REASON"]
    if with_namespace:
        headers.insert(0, "NAMESPACE")
    if with_object:
        headers.append("OBJECT")
    headers += ["FROM", "MESSAGE"]
    rows = []
    for e in ordered:
        obj = e.get("involvedObject") or e.get("regarding") or {}
        source = e.get("source") or {}
        row: list[Any] = [_event_age(e, now), e.get("type"), e.get("reason")]
        if with_namespace:
            row.insert(0, (e.get("metadata") or {}).get("namespace"))
        if with_object:
            row.append(f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}")
        row += [
            source.get("component") or e.get("reportingComponent") or "",
            (e.get("message") or e.get("note") or "").strip(),
        ]
        rows.append(row)
    text = render_table(headers, rows, max_rows=limit, last_cell_limit=EVENT_MESSAGE_LIMIT)
    if dropped:
        kinds = (
            "all Normal"
            if dropped_normal == dropped
            else f"{dropped_normal} Normal, {dropped - dropped_normal} Warning"
        )
        text = f"[{dropped} older events not shown: {kinds}]\n" + text
    if indent:
        text = "\n".join(indent + line for line in text.splitlines())
    return text


def quantity(value: Any) -> Decimal:
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError):
        return Decimal(0)


def format_cpu(cores: Decimal) -> str:
    return f"{int(cores * 1000)}m"


def format_memory(num_bytes: Decimal) -> str:
    return f"{int(num_bytes / (1024 * 1024))}Mi"
