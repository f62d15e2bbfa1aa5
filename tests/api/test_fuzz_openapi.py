"""Property-based fuzzing from the API's own /openapi.json: bodies that match each endpoint's
request schema, and arbitrary JSON, never get a server error. The real operator answers the
requests that are valid (with an instant scripted model), so valid chats run end to end."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lestrade.modelserver import Rule, RuleCondition, Scenario, Step
from lestrade.resources.rest import request_json

# The API serves from another thread of this process, and its own code may use `random`
# (retry jitter) while Hypothesis generates: not the strategies' doing.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")

POSTS = [
    "/api/chat",
    "/api/issue_chat",
    "/api/workload_health_chat",
    "/api/investigate",
    "/api/workload_health_check",
    "/api/console/investigations",
    "/api/console/conversations",
    "/api/alertmanager",
]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture
def fuzz_api(stack: Any, model_server: Any, scenario_name: str) -> Any:
    # A model that answers what it is asked: "ok", and a verdict where a health check asks for
    # one (a model that gives none is a 502, test_investigate_api.py; not the server's fault).
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[Step(content="ok")],
            rules=[
                Rule(
                    when=RuleCondition(any_message_contains="workload_healthy"),
                    respond=Step(content='{"workload_healthy": true, "root_cause_summary": "ok"}'),
                )
            ],
        )
    )
    s = stack(scenario_name, wait_timeout=60)
    spec = httpx.get(f"{s.base}/openapi.json").json()
    return s, spec


def request_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    return spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


def from_schema(schema: dict[str, Any], components: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of the JSON schema subset FastAPI emits for our bodies (objects, refs, anyOf,
    enums, strings with lengths, numbers, booleans, arrays, free-form objects). Optional
    properties are sometimes left out; strings and lists stay short."""
    if "$ref" in schema:
        return from_schema(components[schema["$ref"].rsplit("/", 1)[-1]], components, depth)
    if "anyOf" in schema:
        return st.one_of([from_schema(s, components, depth) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        low = int(schema.get("minLength", 0))
        return st.text(min_size=low, max_size=max(low, min(int(schema.get("maxLength", 30)), 30)))
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(-(2**40), 2**40)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "null":
        return st.none()
    if kind == "array":
        items = schema.get("items") or {}
        return st.lists(from_schema(items, components, depth + 1) if items else JSON, max_size=3 if depth < 3 else 0)
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        if not properties:
            return st.dictionaries(st.text(max_size=10), JSON, max_size=3)
        required = set(schema.get("required") or [])
        return st.fixed_dictionaries(
            {k: from_schema(v, components, depth + 1) for k, v in properties.items() if k in required},
            optional={k: from_schema(v, components, depth + 1) for k, v in properties.items() if k not in required},
        )
    return JSON


@pytest.mark.parametrize("path", POSTS)
def test_bodies_from_the_schema_never_get_a_server_error(fuzz_api: Any, path: str) -> None:
    s, spec = fuzz_api
    if path == "/api/alertmanager":
        # a route that takes every alert (three Investigations at most): hostile labels and
        # annotations reach the matcher, the templates and the created Investigation
        request_json(
            s.api_client,
            "POST",
            f"/apis/lestrade.dev/v1alpha1/namespaces/{s.namespace}/alertroutes",
            {
                "apiVersion": "lestrade.dev/v1alpha1",
                "kind": "AlertRoute",
                "metadata": {"name": "everything"},
                "spec": {
                    "alertNamespace": "Any",
                    "limits": {"maxPerInterval": 3},
                    "investigation": {
                        "title": "{{ labels.alertname }} {{ labels.x | upper }}",
                        "description": "{{ annotations.description | truncate(50) }}",
                    },
                },
            },
        )
    bodies = from_schema(request_schema(spec, path), spec["components"]["schemas"])
    seen: list[int] = []

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body=bodies)
    def check(body: dict[str, Any]) -> None:
        body = {k: v for k, v in body.items() if k != "stream"}  # the JSON endpoints; streams below
        response = httpx.post(f"{s.base}{path}", json=body, timeout=90)
        seen.append(response.status_code)
        assert response.status_code < 500, (body, response.text)

    check()
    assert seen  # the property ran


def test_arbitrary_json_never_gets_a_server_error(fuzz_api: Any) -> None:
    s, _ = fuzz_api

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(path=st.sampled_from([*POSTS, "/api/stream/chat", "/api/stream/investigate"]), body=JSON)
    def check(path: str, body: Any) -> None:
        if isinstance(body, dict) and body.get("ask") is not None:
            body = {**body, "model": "no-such-model"}  # keep this one to refusals: fast
        response = httpx.post(f"{s.base}{path}", json=body, timeout=60)
        assert response.status_code < 500, (path, body, response.text)

    check()
