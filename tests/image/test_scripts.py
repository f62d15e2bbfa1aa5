"""The scripts behind `make image` and `make e2e-kind` (they cannot run here: no container
registry, no container engine for kind) parse, pin what they pull, and test the image they are
given with the chart of this checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["hack/image/build.sh", "hack/image/local-bases.sh", "hack/image/verify.sh", "e2e/kind/run.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse_and_stop_on_errors(script: str) -> None:
    path = REPO / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    assert "set -euo pipefail" in path.read_text()
    parsed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr


def test_make_targets_call_the_scripts_with_the_charts_image() -> None:
    dry = subprocess.run(
        ["make", "-n", "image", "e2e-kind"], cwd=REPO, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert dry.returncode == 0, dry.stderr
    version = re.search(r'^appVersion: "?([^"\n]+)"?$', (REPO / "charts/lestrade/Chart.yaml").read_text(), re.M)
    assert version is not None
    image = f"IMAGE=ghcr.io/lestrade/lestrade:{version.group(1)}"
    assert f"{image} hack/image/build.sh" in dry.stdout
    assert f"{image} PY=.venv/bin/python e2e/kind/run.sh" in dry.stdout


def test_the_kind_run_pins_its_cluster_and_tests_the_loaded_image() -> None:
    script = (REPO / "e2e/kind/run.sh").read_text()
    assert re.search(r"KIND_NODE_IMAGE:-kindest/node:v[\d.]+@sha256:[0-9a-f]{64}", script)
    assert re.search(r'go install "sigs.k8s.io/kind@\$KIND_VERSION"', script)
    assert re.search(r"^KIND_VERSION=v\d+\.\d+\.\d+$", script, re.M)
    # the image on the node is the one tested: never pulled, never another tag
    assert "--set image.pullPolicy=Never" in script and 'image.tag="${IMAGE##*:}"' in script
    assert "charts/lestrade" in script and "e2e/test_deployed.py" in script
    for variable in ("LESTRADE_TEST_KUBECONFIG", "LESTRADE_E2E_API_URL", "LESTRADE_E2E_RELEASE_NAMESPACE"):
        assert variable in script and variable in (REPO / "e2e/conftest.py").read_text(), variable
