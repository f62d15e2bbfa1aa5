"""The check every structured answer goes through (`operator/agent/structured.py`)."""

from __future__ import annotations

import json

from lestrade.operator.agent.structured import check, instruction, native, structured

FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "R",
        "schema": {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}, "why": {"type": "string"}},
            "required": ["ok", "why"],
        },
    },
}


def test_a_valid_object_passes_and_a_fence_is_taken_off() -> None:
    bare = check('{"ok": true, "why": "x"}', FORMAT)
    assert bare.error is None and json.loads(bare.text) == {"ok": True, "why": "x"}
    fenced = check('Sure:\n```json\n{"ok": false, "why": "y"}\n```\nDone.', FORMAT)
    assert fenced.error is None and fenced.text == '{"ok": false, "why": "y"}'


def test_each_failure_says_what_is_wrong() -> None:
    assert check("It is fine.", FORMAT).error == "the answer is not JSON"
    assert check("", FORMAT).error == "the answer is empty"
    assert "not an object" in (check("[1, 2]", FORMAT).error or "")
    assert "fenced block is not valid JSON" in (check("```json\n{ok: 1}\n```", FORMAT).error or "")
    wrong_type = check('{"ok": "yes", "why": "x"}', FORMAT).error or ""
    assert wrong_type.startswith("ok:") and "boolean" in wrong_type
    missing = check('{"ok": true}', FORMAT).error or ""
    assert "'why' is a required property" in missing


def test_json_object_needs_an_object_and_text_is_not_structured() -> None:
    assert check('{"a": 1}', {"type": "json_object"}).error is None
    assert check('"a"', {"type": "json_object"}).error is not None
    assert structured(FORMAT) and structured({"type": "json_object"})
    assert not structured({"type": "text"}) and not structured(None)


def test_the_instruction_carries_the_schema_and_the_table_decides_who_needs_it() -> None:
    text = instruction(FORMAT, "[note]")
    assert text.startswith("[note]") and json.dumps(FORMAT["json_schema"]["schema"], separators=(",", ":")) in text
    assert native("openai/gpt-4o") is True
    assert native("openai/some-scripted-model") is False
