"""The second check of a scoped query, by the server's own parser, over real HTTP.

Two stand-ins for Prometheus-compatible servers (the real Prometheus case is in
test_promql_scope_enforced.py): one without `/api/v1/parse_query` (Thanos, Mimir, ...), where
the confined query is sent as rewritten here; and one whose parser reads the rewritten query
differently (a selector without the namespace matcher), where nothing is sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest

from lestrade.operator.tools.prometheus import prometheus_toolset
from lestrade.operator.tools.promql_scope import NamespaceScope

VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [{"metric": {"__name__": "up", "namespace": "shop"}, "value": [1700000000, "1"]}],
    },
}
SLOPPY_AST = {"type": "vectorSelector", "name": "up", "matchers": [{"type": "=", "name": "__name__", "value": "up"}]}


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, Any]]]:
    state: dict[str, Any] = {"parse_query": None, "queries": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 — http.server's naming
            form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
            if self.path == "/api/v1/parse_query":
                if state["parse_query"] is None:
                    return self._send(404, {"error": "not found"})
                return self._send(200, {"status": "success", "data": state["parse_query"]})
            state["queries"].append(form["query"][0])
            self._send(200, VECTOR)

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()


def _query_tool(url: str) -> Any:
    return next(
        t
        for t in prometheus_toolset(url, scope=NamespaceScope(("shop",))).tools
        if t.name == "prometheus_instant_query"
    )


async def test_a_server_without_parse_query_gets_the_locally_confined_query(server) -> None:
    url, state = server
    out = await _query_tool(url).run({"query": 'up or {__name__=~".+"}'})
    assert out.status == "success", out.text()
    (sent,) = state["queries"]
    assert sent.count('namespace="shop"') == 2, sent


async def test_a_server_that_parses_differently_gets_nothing(server) -> None:
    url, state = server
    state["parse_query"] = SLOPPY_AST
    out = await _query_tool(url).run({"query": "up"})
    assert out.status == "error" and "parsed the rewritten query differently" in (out.error or ""), out.text()
    assert state["queries"] == []
