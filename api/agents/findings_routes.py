"""`GET /api/findings`: past findings the caller may read (see `lestrade.runs.history` and
`lestrade.api.base.findings`); the same search as the MCP tool `search_findings`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from lestrade.api.agents.runs import Refused, search_findings
from lestrade.api.holmes.chats import ClientError

__all__ = ["router"]

router = APIRouter()


@router.get("/api/findings")
async def findings(
    request: Request,
    q: Annotated[str, Query(max_length=2000, description="Free text, ranked (BM25).")] = "",
    namespace: Annotated[str | None, Query(max_length=63, description="Involved resource's namespace.")] = None,
    kind: Annotated[str | None, Query(max_length=63, description="Involved resource's kind, e.g. Deployment.")] = None,
    name: Annotated[
        str | None, Query(max_length=253, description="Involved resource's name (also matches what it owns).")
    ] = None,
    alert: Annotated[str | None, Query(max_length=253, description="Alert name.")] = None,
    since: Annotated[str | None, Query(max_length=64, description="Finished after: 24h, 7d or RFC 3339.")] = None,
    until: Annotated[str | None, Query(max_length=64, description="Finished before: 24h, 7d or RFC 3339.")] = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 10,
) -> dict[str, Any]:
    """Finished Investigations and Conversation answers in namespaces where the caller may
    `list` them: run, age, root cause, the fix applied or approved; best match first."""
    try:
        found = await search_findings(
            request,
            query=q,
            namespace=namespace,
            kind=kind,
            name=name,
            alert=alert,
            since=since,
            until=until,
            limit=limit,
        )
    except Refused as exc:
        raise ClientError(400, "since" if "since" in str(exc) else "query", str(exc)) from None
    return {"findings": found}
