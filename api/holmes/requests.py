"""What every JSON answer of the HolmesGPT endpoints carries: `metadata.request_id` (also the
`X-Request-Id` header), and the status of a failed run — 429 with `Retry-After` when the model
provider rate-limited it (error code 5204), 500 otherwise."""

from __future__ import annotations

import secrets
from typing import Any

from fastapi.responses import JSONResponse

from lestrade.api.holmes.events import RATE_LIMIT_ERROR_CODE

__all__ = ["REQUEST_ID_HEADER", "new_request_id", "error_response"]

REQUEST_ID_HEADER = "X-Request-Id"
RETRY_AFTER_SECONDS = "30"
"""What a rate-limited client is told to wait: the run already retried with the provider's own
Retry-After, so this is a pause before asking again, not the provider's figure."""


def new_request_id() -> str:
    return f"req-{secrets.token_hex(12)}"


def error_response(data: dict[str, Any], names: dict[str, str], request_id: str) -> JSONResponse:
    rate_limited = data.get("error_code") == RATE_LIMIT_ERROR_CODE
    headers = {REQUEST_ID_HEADER: request_id}
    if rate_limited:
        headers["Retry-After"] = RETRY_AFTER_SECONDS
    body = {"detail": data["msg"], **data, **names, "metadata": {"request_id": request_id}}
    return JSONResponse(body, 429 if rate_limited else 500, headers=headers)
