"""The answer of `/api/workload_health_check`: the JSON object the Robusta runner parses.

The runner reads `analysis` as JSON with a boolean `workload_healthy` (and HolmesGPT's workload
prompt asks for `root_cause_summary` beside it); prose there is logged as "Error in holmes
response format" and dropped. So the Investigation asks for exactly those two fields twice:
as its sections (the instructions every model reads) and as a `json_schema` response_format
(structured output, where the provider supports it; litellm drops it where it does not). The
sections the operator parsed from the answer are then checked here and turned into the object,
so a model that wrote `"workload_healthy": "no"` or a markdown heading still gives the runner a
boolean, and one that gave no verdict at all is an error naming what is missing, never prose.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["HEALTH_SECTIONS", "HEALTH_RESPONSE_FORMAT", "HealthAnswerError", "health_answer"]

HEALTH_SECTIONS: dict[str, str] = {
    "workload_healthy": "true if the workload is healthy, false if it is in an error state (one word: true or false)",
    "root_cause_summary": "a concise explanation leading to the workload_healthy result: the "
    "reason and root cause of the workload's issues, or why it is healthy",
}

HEALTH_RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "WorkloadHealthResult",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "workload_healthy": {"type": "boolean", "description": HEALTH_SECTIONS["workload_healthy"]},
                "root_cause_summary": {"type": "string", "description": HEALTH_SECTIONS["root_cause_summary"]},
            },
            "required": ["workload_healthy", "root_cause_summary"],
            "additionalProperties": False,
        },
    },
}

_YES = {"true", "yes", "healthy", "ok"}
_NO = {"false", "no", "unhealthy", "not healthy", "error"}


class HealthAnswerError(ValueError):
    """The model's answer holds no verdict the runner could use; the message says what."""


def _verdict(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = " ".join(str(value or "").strip().strip("*`\"'.").lower().split())
    if text in _YES:
        return True
    if text in _NO:
        return False
    raise HealthAnswerError(f"workload_healthy must be true or false; the model answered {str(value)[:200]!r}")


def health_answer(sections: dict[str, Any] | None, analysis: str | None) -> dict[str, Any]:
    """{"workload_healthy": bool, "root_cause_summary": str} from the run's sections (or, when
    the operator found none, from an analysis that is itself the JSON object)."""
    fields: dict[str, Any] = dict(sections or {})
    if not fields and analysis:
        try:
            parsed = json.loads(analysis)
        except ValueError:
            parsed = None
        fields = parsed if isinstance(parsed, dict) else {}
    by_key = {k.strip().lower().replace(" ", "_"): v for k, v in fields.items()}
    if "workload_healthy" not in by_key:
        raise HealthAnswerError("the model's answer has no workload_healthy verdict")
    healthy = _verdict(by_key["workload_healthy"])
    summary = str(by_key.get("root_cause_summary") or "").strip()
    if not summary:
        raise HealthAnswerError("the model's answer has no root_cause_summary")
    return {"workload_healthy": healthy, "root_cause_summary": summary}
