"""Client mistakes get a 400/413/422 that names the field and the reason, never a 5xx; bodies
without a JSON Content-Type are read as JSON. No operator runs here: every request below is
refused before anything is created (and the test checks that nothing was)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from apikit import conversations

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


@pytest.fixture
def api(stack: Any, scenario_name: str) -> Any:
    return stack(scenario_name, "other-model", operator=False, max_body=64 * 1024)


def refused(response: httpx.Response, status: int, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    text = str(body.get("detail") or body.get("message") or body.get("error"))
    assert field in text, f"{field!r} not named in {text}"
    return body


def loc_fields(body: dict[str, Any]) -> list[str]:
    return [str(error["loc"][-1]) for error in body["detail"]]


CASES: list[tuple[str, str, Any, int, str]] = [
    (
        "history must start with system",
        "/api/chat",
        {"ask": "hi", "conversation_history": [{"role": "user", "content": "x"}]},
        400,
        "conversation_history",
    ),
    ("empty history", "/api/chat", {"ask": "hi", "conversation_history": []}, 400, "conversation_history"),
    (
        "message without a role",
        "/api/chat",
        {"ask": "hi", "conversation_history": [SYSTEM, {"content": "x"}]},
        400,
        "conversation_history[1].role",
    ),
    ("missing ask", "/api/chat", {"conversation_history": [SYSTEM]}, 422, "ask"),
    (
        "pause tools need a stream",
        "/api/chat",
        {"ask": "hi", "frontend_tools": [{"name": "chart", "description": "d"}]},
        400,
        "frontend_tools",
    ),
    (
        "response_format needs a schema",
        "/api/chat",
        {"ask": "hi", "response_format": {"type": "json_schema"}},
        400,
        "response_format.json_schema.schema",
    ),
    (
        "response_format type",
        "/api/chat",
        {"ask": "hi", "response_format": {"type": "xml"}},
        400,
        "response_format.type",
    ),
    (
        "images too large to keep",
        "/api/chat",
        {"ask": "hi", "images": ["data:image/png;base64," + "A" * 4096]},
        400,
        "images[0]",
    ),
    (
        "decisions for an unknown conversation",
        "/api/chat",
        {"conversation_id": "no-such-chat", "tool_decisions": [{"tool_call_id": "x", "approved": True}]},
        404,
        "conversation_id",
    ),
    (
        "decisions nobody waits for",
        "/api/chat",
        {"conversation_history": [SYSTEM], "tool_decisions": [{"tool_call_id": "x", "approved": True}]},
        400,
        "conversation_history",
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_semantic_mistakes_name_the_field(api: Any, path: str, body: Any, status: int, field: str) -> None:
    refused(httpx.post(f"{api.base}{path}", json=body), status, field)
    assert conversations(api.api_client, api.namespace) == []


def test_an_unknown_model_lists_the_valid_names(api: Any, scenario_name: str) -> None:
    for path, body in (
        ("/api/chat", {"ask": "hi", "model": "gpt-nope"}),
        (
            "/api/investigate",
            {"source": "s", "title": "t", "description": "d", "subject": {}, "context": {}, "model": "gpt-nope"},
        ),
    ):
        body = refused(httpx.post(f"{api.base}{path}", json=body), 400, "model")
        assert "gpt-nope" in body["detail"] and scenario_name in body["detail"] and "other-model" in body["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ask": "x" * 16385}, "ask"),
        ({"ask": "hi", "stream": [1]}, "stream"),
        ({"ask": "hi", "conversation_history": ["not a message"]}, "0"),
        ({"ask": "hi", "tool_decisions": [{"tool_call_id": "x"}]}, "approved"),
        ({"ask": "hi", "images": [{"detail": "high"}]}, "url"),
    ],
)
def test_schema_mistakes_are_422_with_the_field(api: Any, body: Any, field: str) -> None:
    response = httpx.post(f"{api.base}/api/chat", json=body)
    assert response.status_code == 422, response.text
    assert field in loc_fields(response.json())


def test_investigate_requires_the_documented_fields(api: Any) -> None:
    response = httpx.post(f"{api.base}/api/investigate", json={"title": "t"})
    assert response.status_code == 422
    assert {"source", "description", "subject", "context"} <= set(loc_fields(response.json()))


@pytest.mark.parametrize("raw", [b"{not json", b"[]", b'"text"', b"", b"\xff\xfe"])
def test_bodies_that_are_not_a_json_object(api: Any, raw: bytes) -> None:
    response = httpx.post(f"{api.base}/api/chat", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/x-www-form-urlencoded",
        "text/plain",
        "text/plain;charset=UTF-8",
        "multipart/form-data; boundary=x",
    ],
)
def test_without_authentication_bodies_must_say_they_are_json(api: Any, content_type: str | None) -> None:
    """Authentication is off here (as under `make run`): a web page's cross-site POST (a form
    or text/plain, which needs no preflight) must not start a run (issue 29)."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = httpx.post(f"{api.base}/api/chat", content=b'{"ask": "hi", "model": "gpt-nope"}', headers=headers)
    refused(response, 415, "Content-Type")
    json_ok = httpx.post(
        f"{api.base}/api/chat",
        content=b'{"ask": "hi", "model": "gpt-nope"}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    refused(json_ok, 400, "model")  # read as JSON: the model name was read


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"Host": "attacker.example"}, "Host"),  # DNS rebinding: the page's own name, resolved to 127.0.0.1
        ({"Host": "127.0.0.1.nip.io:8080"}, "Host"),
        ({"Host": "localhost.attacker.example"}, "Host"),
        ({"Origin": "https://attacker.example"}, "Origin"),
        ({"Origin": "null"}, "Origin"),
        ({"Origin": "http://localhost.attacker.example"}, "Origin"),
    ],
)
def test_without_authentication_only_local_pages_and_names_are_answered(
    api: Any, headers: dict[str, str], field: str
) -> None:
    for method, path in (("POST", "/api/chat"), ("GET", "/api/model"), ("GET", "/v1/contexts/x")):
        response = httpx.request(method, f"{api.base}{path}", json={"ask": "hi"}, headers=headers)
        refused(response, 403, field)
    assert httpx.get(f"{api.base}/api/model", headers={"Origin": api.base, "Host": "localhost"}).status_code == 200


def test_without_authentication_refusals_keep_each_reference_documents_error_shape(api: Any) -> None:
    """The context store (004) answers `{error, message}` and the harness API (003) `{error}`,
    also when the browser guard refuses; the HolmesGPT endpoints FastAPI's `{detail}`."""
    form = {"Content-Type": "text/plain"}
    store = httpx.put(f"{api.base}/v1/contexts/x", content=b"{}", headers=form)
    assert store.status_code == 415 and set(store.json()) == {"error", "message"}, store.text
    assert store.json()["error"] == "unsupported_media_type" and "Content-Type" in store.json()["message"]
    harness = httpx.post(f"{api.base}/chat", content=b"{}", headers=form)
    assert harness.status_code == 415 and set(harness.json()) == {"error"}, harness.text
    holmes = httpx.post(f"{api.base}/api/chat", content=b"{}", headers=form)
    assert holmes.status_code == 415 and set(holmes.json()) == {"detail"}, holmes.text


def test_bodies_over_the_size_limit(api: Any) -> None:
    big = b'{"ask": "' + b"x" * (70 * 1024) + b'"}'
    refused(httpx.post(f"{api.base}/api/chat", content=big, headers={"Content-Type": "application/json"}), 413, "body")

    def chunks() -> Any:  # no Content-Length: the limit is counted as the body arrives
        for _ in range(70):
            yield b"x" * 1024

    refused(
        httpx.post(f"{api.base}/api/chat", content=chunks(), headers={"Content-Type": "application/json"}), 413, "body"
    )


def test_a_last_event_id_the_server_never_issued(api: Any) -> None:
    for last in ("garbage", "conv/no-such-chat/3"):
        response = httpx.post(
            f"{api.base}/api/chat", json={"ask": "hi", "stream": True}, headers={"Last-Event-ID": last}
        )
        assert response.status_code in (400, 404), response.text
        assert "Last-Event-ID" in response.json()["detail"]
    assert conversations(api.api_client, api.namespace) == []


def test_openapi_documents_every_endpoint(api: Any) -> None:
    spec = httpx.get(f"{api.base}/openapi.json").json()
    for path in (
        "/api/chat",
        "/api/model",
        "/api/investigate",
        "/api/stream/investigate",
        "/api/issue_chat",
        "/api/workload_health_check",
        "/api/workload_health_chat",
        "/api/stream/chat",
        "/api/stream/issue_chat",
    ):
        assert path in spec["paths"], path
    chat = spec["paths"]["/api/chat"]["post"]
    schema = chat["requestBody"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/ChatRequest")
    fields = spec["components"]["schemas"]["ChatRequest"]["properties"]
    assert {
        "ask",
        "conversation_history",
        "model",
        "response_format",
        "images",
        "stream",
        "enable_tool_approval",
        "tool_decisions",
        "frontend_tools",
        "frontend_tool_results",
        "additional_system_prompt",
        "behavior_controls",
    } <= set(fields)


def test_a_json_request_gives_up_waiting_with_a_504_naming_the_run(stack: Any, scenario_name: str) -> None:
    """No operator runs here, so the chat never ends; the request says where it went."""
    s = stack(scenario_name, operator=False, wait_timeout=1)
    response = httpx.post(f"{s.base}/api/chat", json={"ask": "Anyone there?"}, timeout=30)
    assert response.status_code == 504
    (conv,) = conversations(s.api_client, s.namespace)
    assert conv["metadata"]["name"] in response.json()["detail"]
