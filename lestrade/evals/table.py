"""The scripted run's table: one row per scenario, then the summary line CI greps for."""

from __future__ import annotations

from collections.abc import Sequence

from lestrade.evals.recall import Recall

__all__ = ["recall_table", "summary_line", "recall_percent"]

LOSS_KINDS = ("truncated", "redacted", "compacted", "no tool", "not run")


def recall_percent(recalls: Sequence[Recall]) -> float:
    return 100.0 * sum(r.covered for r in recalls) / len(recalls) if recalls else 0.0


def summary_line(recalls: Sequence[Recall]) -> str:
    covered = sum(r.covered for r in recalls)
    return f"evidence recall: {covered}/{len(recalls)} ({recall_percent(recalls):.0f}%)"


def recall_table(recalls: Sequence[Recall]) -> str:
    """A fixed-width table: scenario, facts reached, tokens, losses by kind, and problems."""
    headers = ["SCENARIO", "RECALL", "TOKENS", *(k.upper() for k in LOSS_KINDS), "SETUP", "RUN", "RESULT"]
    rows = []
    for r in recalls:
        losses = r.losses()
        problems = []
        if r.phase and r.phase != "Succeeded":
            problems.append(f"{r.phase}: {r.message[:80]}")
        problems += r.citations + r.unoffered
        missing = [f.fact.label for f in r.facts if not f.reached]
        if missing:
            problems.append("missing " + "; ".join(f"{m[:40]!r}" for m in missing))
        rows.append(
            [
                r.scenario,
                f"{r.reached}/{len(r.facts)}",
                str(r.tokens),
                *(str(losses.get(k, 0) or "-") for k in LOSS_KINDS),
                f"{r.staging_seconds:.0f}s",
                f"{r.seconds:.0f}s",
                "ok" if r.covered else "FAIL " + " | ".join(problems),
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers[:-1])]
    lines = []
    for row in [headers, *rows]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1])
    return "\n".join(lines)
