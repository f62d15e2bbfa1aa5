"""What confining a scoped run's PromQL costs: parse, rewrite every selector, parse and check again.

Prints milliseconds per query beside the target (a usual query well under the ~10 ms of a
Prometheus round trip; the worst shapes the size bound lets through under 150 ms, run in a
worker thread) on CPU time; exits non-zero when one misses it. The server-side check
(`/api/v1/parse_query`) is one more HTTP round trip and is not measured here.
"""

from __future__ import annotations

import sys
import time

from lestrade.operator.tools.promql_scope import NamespaceScope, ScopeRefused, enforce_query

TARGET_MS = 10.0
SCOPE = NamespaceScope(("shop", "shop-db"))
CASES = {
    "one selector": "up",
    "typical": 'histogram_quantile(0.95, sum by (le, pod) (rate(http_request_duration_seconds_bucket{code=~"5.."}[5m])))'
    ' / on(pod) group_left() max_over_time(kube_pod_container_resource_limits{resource="memory"}[1h:1m])',
    # the worst shapes under the size bound (MAX_NODES): the parser's tree walks grow faster
    # than the tree, which is why the bound exists; a 200-selector query is refused at once
    "30-way or": " or ".join(f'metric_{i}{{job="j{i}"}}' for i in range(30)),
    "58 nested calls": "abs(" * 58 + "up" + ")" * 58,
    "200-way or": " or ".join(f"m{i}" for i in range(200)),
}
WORST_CASE_MS = 150.0


def main() -> int:
    worst = 0.0
    for name, query in CASES.items():
        runs = 20
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(runs):
            try:
                enforce_query(query, SCOPE)
            except ScopeRefused:
                pass  # refused by the size bound: what is measured is how fast
        cpu_ms = (time.process_time() - cpu) / runs * 1000
        wall_ms = (time.perf_counter() - wall) / runs * 1000
        limit = TARGET_MS if name in ("one selector", "typical") else WORST_CASE_MS
        worst = max(worst, cpu_ms / limit)
        print(f"promql scope {name:14s} {cpu_ms:8.2f} ms cpu {wall_ms:8.2f} ms wall (target < {limit:.0f} ms)")
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
