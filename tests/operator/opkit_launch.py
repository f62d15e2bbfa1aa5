"""`python -m lestrade.operator` (or, with `job` first, `python -m lestrade.operator.job`),
with the test tools added to the registry.

The kill -9 and Job tests need a tool whose executions can be counted in the cluster;
everything else (argument parsing, Kopf, signals) is the product's own `main`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from opkit import test_registry  # noqa: E402

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)

if __name__ == "__main__":
    if sys.argv[1:2] == ["job"]:
        from lestrade.operator.job import main as job_main

        sys.exit(job_main(sys.argv[2:], tools=test_registry))
    from lestrade.operator.__main__ import main

    sys.exit(main(tools=test_registry))
