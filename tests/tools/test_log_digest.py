"""Log digests keep the evidence while dropping repetition (pure functions; the tools' use of them
is in test_kubernetes_tools.py)."""

from __future__ import annotations

import random

from lestrade.operator.tools.kubernetes.digest import digest_log


def _java_crashes(starts: int = 4, requests: int = 60) -> str:
    rng = random.Random(7)
    lines, second = [], 0

    def ts() -> str:
        nonlocal second
        second += 2
        return f"2026-11-26T10:{second // 60 % 60:02d}:{second % 60:02d}.000Z"

    for start in range(starts):
        lines.append(f"{ts()} INFO  Starting InventoryService v1.4.2 attempt {start}")
        lines += [
            f"{ts()} INFO  GET /api/items/{rng.randint(1, 9999)} 200 {rng.randint(2, 80)}ms" for _ in range(requests)
        ]
        lines.append(f"{ts()} ERROR Failed to allocate cache buffer of {1024 + start} MiB")
        lines.append("java.lang.OutOfMemoryError: Java heap space")
        lines += [f"\tat com.example.inventory.Cache.load(Cache.java:{100 + f})" for f in range(20)]
        lines.append("\t... 12 more")
        lines.append(f"{ts()} WARN  Shutting down after fatal error")
    return "\n".join(lines)


def test_repeated_stack_traces_are_counted_and_kept_once() -> None:
    text = _java_crashes()
    digest = digest_log(text, keep_tail=5)
    assert len(digest) < len(text) / 3
    assert digest.startswith("[log digest: ")
    # The first trace is verbatim and its repeats a count; the last one, before the end, is whole.
    assert digest.count("java.lang.OutOfMemoryError: Java heap space") == 2
    assert "[×3: these 22 lines repeated]" in digest
    assert digest.count("at com.example.inventory.Cache.load(Cache.java:119)") == 2
    # Error lines are never clustered away: every distinct one is there, verbatim.
    for start in range(4):
        assert f"ERROR Failed to allocate cache buffer of {1024 + start} MiB" in digest
    # Exact repeats say how often and when (first … last timestamp).
    assert "WARN  Shutting down after fatal error" in digest
    assert "[×3, " in digest and " … " in digest
    # Lines that differ in numbers only: the first and last verbatim, one line counts the rest.
    assert "more lines like this: INFO  GET /api/items/<*> <*> <*>ms]" in digest


def test_the_last_lines_before_the_end_stay_verbatim() -> None:
    text = _java_crashes()
    digest = digest_log(text, keep_tail=30)
    assert digest.endswith("\n".join(text.split("\n")[-30:]))


def test_short_logs_are_unchanged() -> None:
    text = "\n".join(f"line {i}" for i in range(20))
    assert digest_log(text) == text


def test_one_key_line_among_thousands_survives() -> None:
    rng = random.Random(3)
    lines = [
        f"2026-11-26T09:{i // 60 % 60:02d}:{i % 60:02d}Z INFO  heartbeat ok latency={rng.randint(1, 9)}ms"
        for i in range(5000)
    ]
    lines[2717] = "2026-11-26T09:45:17Z INFO  connecting to payments-db.shop.svc:5432 as user app"
    digest = digest_log("\n".join(lines), keep_tail=10)
    assert "connecting to payments-db.shop.svc:5432 as user app" in digest
    assert len(digest.split("\n")) < 30


def test_hostile_shapes_stay_data_and_the_digest_is_never_longer() -> None:
    # Continuation lines without a first line, giant lines, nothing but repeats: no crash, never longer.
    for text in ("\tat x\n" * 500, "A" * 200_000 + "\n" + "B\n" * 200, "\n" * 1000, "x\n" * 10_000):
        digest = digest_log(text)
        assert len(digest) <= len(text)
