"""Structured output for every run that asks for it, whether or not the provider supports it.

A run with a `response_format` (`/api/chat`'s field, `/api/workload_health_check`'s verdict,
spec.responseFormat) sends it with each model call; providers with structured output answer
with the object. Providers without it (litellm drops the parameter for them) would answer
prose, so for those the schema is also asked in words, as a note after the messages of each
call (`instruction`, not stored in the transcript). Either way the final answer is checked
(`check`): JSON (a fenced block is accepted), an object, valid against the `json_schema`
schema; the answer is then the bare JSON (no fence). An answer that fails gets one corrective
step telling the model what was wrong; the answer after that stands as given (the workload
health check then answers 502 naming what is missing, `api/holmes/workload.py`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["StructuredAnswer", "check", "instruction", "native", "retry_note", "schema_of", "structured"]

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)\n?```", re.S)
MAX_SCHEMA_CHARS = 8000


def structured(response_format: Mapping[str, Any] | None) -> bool:
    """Whether the format asks for JSON (`json_schema` or `json_object`; `text` does not)."""
    return bool(response_format) and (response_format or {}).get("type") in ("json_schema", "json_object")


def schema_of(response_format: Mapping[str, Any]) -> dict[str, Any] | None:
    schema = (response_format.get("json_schema") or {}).get("schema")
    return schema if isinstance(schema, dict) else None


def native(model: str) -> bool:
    """litellm's table says the provider takes a JSON schema (unknown models: it does not)."""
    try:
        import litellm

        return bool(litellm.supports_response_schema(model=model))
    except Exception:  # noqa: BLE001 - an unknown provider is one without structured output
        return False


def _schema_text(response_format: Mapping[str, Any]) -> str:
    schema = schema_of(response_format)
    if schema is None:
        return "a JSON object"
    text = json.dumps(schema, separators=(",", ":"))
    if len(text) > MAX_SCHEMA_CHARS:
        text = text[:MAX_SCHEMA_CHARS] + "…"
    return f"a JSON object valid against this JSON Schema: {text}"


def instruction(response_format: Mapping[str, Any], note_prefix: str) -> str:
    """What a model without structured output is told with every call of the run."""
    return (
        f"{note_prefix} Your final answer (the reply without tool calls) must be only "
        f"{_schema_text(response_format)}. No prose and no markdown around it."
    )


def retry_note(response_format: Mapping[str, Any], error: str, note_prefix: str) -> str:
    return f"{note_prefix} Your answer was rejected: {error}. Reply again with only {_schema_text(response_format)}."


class StructuredAnswer:
    """An answer checked against a response_format: `text` is the JSON as the model wrote it
    (without a fence), `error` says what is wrong, None when nothing is."""

    def __init__(self, text: str, error: str | None) -> None:
        self.text = text
        self.error = error


def check(content: str | None, response_format: Mapping[str, Any]) -> StructuredAnswer:
    raw = (content or "").strip()
    fenced = _FENCE.search(raw)
    candidate = raw
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
        if fenced is not None:
            candidate = fenced.group(1).strip()
            try:
                value = json.loads(candidate)
            except ValueError as exc:
                return StructuredAnswer(raw, f"the fenced block is not valid JSON ({exc})")
        else:
            return StructuredAnswer(raw, "the answer is not JSON" if raw else "the answer is empty")
    if not isinstance(value, dict):
        return StructuredAnswer(candidate, f"the answer is JSON but not an object (a {type(value).__name__})")
    schema = schema_of(response_format)
    if schema is not None:
        import jsonschema

        try:
            validator = jsonschema.validators.validator_for(schema)(schema)
            errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        except jsonschema.SchemaError:
            errors = []  # a schema the checker cannot read: the provider's problem, not the answer's
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "the object"
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            return StructuredAnswer(candidate, f"{where}: {first.message}{more}")
    return StructuredAnswer(candidate, None)
