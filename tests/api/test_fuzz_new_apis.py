"""Arbitrary JSON (and near-valid bodies) at the context store and the hosted chat API never
gets a server error, and every refusal of the context store has the documented shape."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_openapi import JSON

from lestrade.modelserver import Scenario, Step

pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")

PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_call", "tool_result", "reasoning", "image", ""])},
    optional={"text": JSON, "name": JSON, "payload": JSON, "output": JSON, "id": JSON, "tool_call_id": JSON},
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "robot"]), "parts": st.lists(PART, max_size=3)},
    optional={"token_count": JSON, "metadata": JSON},
)
BODIES = {
    ("PUT", "/v1/contexts/fuzz"): st.fixed_dictionaries(
        {},
        optional={
            "token_budget": JSON,
            "trigger_ratio": JSON | st.floats(0, 1),
            "metadata": JSON,
            "policy": st.fixed_dictionaries(
                {"strategy": st.sampled_from(["last_n", "skip_parts", "manual", "x"])},
                optional={"config": st.fixed_dictionaries({}, optional={"limit": JSON, "skip_kinds": JSON})},
            ),
        },
    ),
    ("POST", "/v1/contexts/fuzz/messages"): st.fixed_dictionaries({"message": MESSAGE}, optional={"if_version": JSON}),
    ("POST", "/v1/contexts/fuzz/compact"): st.fixed_dictionaries(
        {"replacement": st.lists(MESSAGE, max_size=3)}, optional={"if_version": JSON}
    ),
    ("PATCH", "/v1/contexts/fuzz/metadata"): st.fixed_dictionaries({"metadata": JSON}),
}


def test_the_context_store_never_gets_a_server_error(stack: Any, scenario_name: str) -> None:
    s = stack(scenario_name, operator=False)
    assert httpx.put(f"{s.base}/v1/contexts/fuzz", json={}).status_code == 200

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(target=st.sampled_from(sorted(BODIES)), data=st.data(), garbage=st.booleans())
    def check(target: tuple[str, str], data: Any, garbage: bool) -> None:
        body = data.draw(JSON if garbage else BODIES[target])
        method, path = target
        response = httpx.request(method, f"{s.base}{path}", json=body, timeout=60)
        assert response.status_code < 500, (target, body, response.text)
        if response.status_code >= 400:
            assert set(response.json()) == {"error", "message"}, response.text

    check()
    # Whatever was stored reads back.
    assert httpx.get(f"{s.base}/v1/contexts/fuzz/tail?limit=1000").status_code == 200
    assert httpx.get(f"{s.base}/v1/contexts/fuzz/context").status_code == 200


def test_the_hosted_chat_never_gets_a_server_error(stack: Any, model_server: Any, scenario_name: str) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content="ok")]))
    s = stack(scenario_name, wait_timeout=60)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(
        body=JSON
        | st.fixed_dictionaries(
            {"ask": st.text(max_size=20)},
            optional={"cluster_id": JSON, "payload": JSON, "additional_system_prompt": JSON, "model": JSON},
        )
    )
    def check(body: Any) -> None:
        response = httpx.post(f"{s.base}/api/holmes/acct/chat", json=body, timeout=90)
        assert response.status_code < 500, (body, response.text)

    check()
