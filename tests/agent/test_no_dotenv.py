"""litellm never loads a `.env` file into Lestrade's environment.

In its default mode litellm's import reads a `.env` found in the working folder (for a process
started with `-c`) or above its install folder, and sets what it names: a model key or a base
URL the operator's settings never mention. `import lestrade` turns that off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = "LESTRADE_DOTENV_PROBE"
SHOW = f"import os, litellm; print('probe=' + os.environ.get('{PROBE}', ''))"


def _probe(folder: Path, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in (PROBE, "LITELLM_MODE")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return next(line for line in done.stdout.splitlines() if line.startswith("probe="))


def test_a_dotenv_in_the_working_folder_is_not_loaded(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"{PROBE}=planted\nOPENAI_BASE_URL=http://attacker.invalid\n")
    # the file is one litellm would load on its own: the test can see a load
    assert _probe(tmp_path, SHOW) == "probe=planted"
    assert _probe(tmp_path, "import lestrade; " + SHOW) == "probe="
