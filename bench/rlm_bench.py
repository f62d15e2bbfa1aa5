"""rlm mode's REPL: what the sandbox costs.

    .venv/bin/python bench/rlm_bench.py [--starts 10] [--executes 200]

Prints:

1. REPL start: from spawning the confined interpreter (rlimits, Landlock, seccomp, `python -I
   -S`) to its `ready` message, median and worst of N starts (a session pays it once);
2. per-execute overhead: a trivial code block (`x += 1`), round trip over the pipes, median;
3. per-call overhead: one `llm_query` from the code answered at once by the parent, median
   (what each tool or model call from code adds on top of the call itself);
4. the REPL's resident memory after start (VmRSS).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import lestrade  # noqa: F401
from lestrade.operator.rlm import Repl


async def _answer(name: str, args: dict) -> str:
    return "ok"


async def main(starts: int, executes: int) -> int:
    start_times = []
    for _ in range(starts):
        began = time.perf_counter()
        repl = Repl()
        await repl.start()
        start_times.append(time.perf_counter() - began)
        await repl.close()
    async with Repl() as repl:
        rss = next(
            line.split()[1]
            for line in Path(f"/proc/{repl.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS")
        )
        await repl.execute("x = 0", _answer)
        exec_times, call_times = [], []
        for _ in range(executes):
            began = time.perf_counter()
            await repl.execute("x += 1", _answer)
            exec_times.append(time.perf_counter() - began)
        result = await repl.execute(
            f"import time\nt = []\nfor _ in range({executes}):\n    s = time.perf_counter()\n"
            "    llm_query('q')\n    t.append(time.perf_counter() - s)\nsorted(t)[len(t) // 2]",
            _answer,
        )
        call_times.append(float(result.stdout))
    print(
        f"REPL start:            median {statistics.median(start_times) * 1000:7.1f} ms, worst {max(start_times) * 1000:7.1f} ms ({starts} starts)"
    )
    print(f"execute overhead:      median {statistics.median(exec_times) * 1000:7.2f} ms ({executes} trivial blocks)")
    print(f"call from code:        median {call_times[0] * 1000:7.2f} ms per llm_query/tool round trip")
    print(f"REPL resident memory:  {int(rss) / 1024:7.1f} MiB")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--executes", type=int, default=200)
    options = parser.parse_args()
    sys.exit(asyncio.run(main(options.starts, options.executes)))
