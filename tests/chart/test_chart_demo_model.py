"""With no model list the chart runs the built-in demo model as a sidecar (localhost only) and
points the operator and the API at it; with a model list (or an existing Secret) it does not."""

from __future__ import annotations

from typing import Any

import pytest

from lestrade.testing.local_release import render_chart

pytestmark = pytest.mark.binaries("helm")


def pod(values: dict[str, Any]) -> dict[str, Any]:
    docs = render_chart("lestrade", "lestrade-system", values)
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]


def env(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_no_model_list_runs_the_demo_model_beside_the_operator_and_the_api() -> None:
    containers = {
        c["name"]: c
        for c in pod(
            {
                "demoModel": {
                    "port": 9876,
                    "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                }
            }
        )["containers"]
    }
    demo = containers["demo-model"]
    assert demo["command"] == ["python", "-m", "lestrade.modelserver", "--host", "127.0.0.1", "--port", "9876"]
    for name in ("operator", "api"):
        assert env(containers[name])["LESTRADE_DEMO_MODEL_URL"] == "http://127.0.0.1:9876/v1", name
        assert "LESTRADE_MODEL_LIST" not in env(containers[name]), name


@pytest.mark.parametrize(
    "values",
    [{"modelList": {"fast": {"model": "openai/gpt-4.1"}}}, {"existingSecret": "my-models"}],
    ids=["modelList", "existingSecret"],
)
def test_a_model_list_replaces_the_demo_model(values: dict[str, Any]) -> None:
    spec = pod(values)
    assert [c["name"] for c in spec["containers"]] == ["operator", "api"]
    assert not any("demo-model" in v["name"] for v in spec["volumes"])
    for container in spec["containers"]:
        assert "LESTRADE_DEMO_MODEL_URL" not in env(container)
        assert env(container)["LESTRADE_MODEL_LIST"] == "/etc/lestrade/models/modelList.yaml"
