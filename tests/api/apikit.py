"""Helpers for the API tests: the API served over a real socket, next to a real operator.

`serve(app)` runs uvicorn in a thread on a free port. The `stack` fixture (conftest.py) starts
the product's operator for the test's namespace and the API for the same namespace and models,
so every request goes the whole way: HTTP -> resource -> operator -> transcript -> HTTP.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from kubernetes import client as k8s

from lestrade.localcluster.cluster import free_port
from lestrade.localcluster.processes import wait_until

__all__ = ["serve", "Stack", "fetch_event_source_messages", "conversations", "wait_ready"]


@contextmanager
def serve(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until("uvicorn started", lambda: server.started, 30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_ready(base: str) -> None:
    wait_until("the API to be ready", lambda: httpx.get(f"{base}/readyz").status_code == 200, 30)


@dataclass
class Stack:
    base: str
    namespace: str
    api_client: k8s.ApiClient
    operator: Any

    def client(self, timeout: float = 90) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=timeout)


def fetch_event_source_messages(raw: bytes) -> list[dict[str, str]]:
    """Splits an SSE body the way @microsoft/fetch-event-source does: a message is dispatched
    on *every* blank line (even one after only a comment), with whatever fields it got. The
    documented client calls JSON.parse(message.data) on each one."""
    messages: list[dict[str, str]] = []
    current: dict[str, str] = {"data": "", "event": "", "id": ""}
    for line in raw.decode().replace("\r\n", "\n").split("\n")[:-1]:
        if line == "":
            messages.append(current)
            current = {"data": "", "event": "", "id": ""}
            continue
        field, sep, value = line.partition(":")
        if not field or not sep and not value:
            continue  # a comment (or a line with no value)
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            current["data"] = f"{current['data']}\n{value}" if current["data"] else value
        elif field in ("event", "id"):
            current[field] = value
    return messages


def conversations(api_client: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "conversations"
    )["items"]


def parse_all(messages: list[dict[str, str]]) -> list[Any]:
    return [json.loads(m["data"]) for m in messages]
