"""Every built-in tool's output passes through redaction: runbooks, TodoWrite, Prometheus, bash."""

from __future__ import annotations

from pathlib import Path

from kubernetes.client import ApiClient, Configuration

from lestrade.operator.tools import default_registry, runbooks_toolset

SECRET = "pw-Zq81-redact-everywhere"


def _offline_client() -> ApiClient:
    config = Configuration()
    config.host = "https://127.0.0.1:1"
    return ApiClient(config)


async def test_runbook_text_is_redacted(tmp_path: Path) -> None:
    (tmp_path / "db.md").write_text(f"# DB\n\n1. Log in with DB_PASSWORD={SECRET}\n")
    out = await runbooks_toolset([tmp_path]).tools[0].run({"name": "db"})
    assert out.status == "success", out.text()
    assert "DB_PASSWORD=[REDACTED]" in out.data and SECRET not in out.data


async def test_todo_prometheus_and_bash_outputs_are_redacted() -> None:
    registry = default_registry(_offline_client(), prometheus_url=f"http://admin:{SECRET}@127.0.0.1:9")
    todo = await registry.get("TodoWrite").run(
        {"todos": [{"id": "1", "content": f"rotate token={SECRET}", "status": "pending"}]}
    )
    assert todo.status == "success", todo.text()
    assert "token=[REDACTED]" in todo.data and SECRET not in todo.data
    prom = await registry.get("prometheus_instant_query").run({"query": "up"})
    assert prom.status == "error"  # nothing listens on port 9; the error names the URL
    assert "http://admin:[REDACTED]@127.0.0.1:9" in prom.text() and SECRET not in prom.text()
    bash = await registry.get("bash").run({"command": f"echo api_key={SECRET}"})
    assert bash.status == "success", bash.text()
    assert bash.data.strip() == "api_key=[REDACTED]"
