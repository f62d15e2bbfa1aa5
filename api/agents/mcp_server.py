"""Lestrade as an MCP server: streamable HTTP at `/mcp`, on the API's port, behind the API's
authentication (a Kubernetes bearer token or an API key on every HTTP request).

Tools: `investigate` (starts an Investigation as the caller, sends progress notifications while
the operator runs it, returns its findings), `ask` (a Conversation turn; `conversation` continues
one by name), `get_run`, `list_runs`, `search_findings`, `pending_approvals` (read-only: approvals
stay with people). Resources: every finished run the caller may read, as
`lestrade://<plural>/<namespace>/<name>` (markdown: the answer, sections, cost).

Stateless (no MCP session is kept between HTTP requests), so any API replica answers any
request, as for the other endpoints; each tool call acts as the HTTP request that carried it
(`ctx.request_context.request`, whose state the auth middleware filled). The SDK's DNS-rebinding
check (Host header allowlist) is off: the API's Host is whatever the Service or Ingress is
called, and in-cluster every request carries a bearer token a browser page cannot forge.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

from fastapi import Request
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ResourceError, ToolError
from mcp.server.fastmcp.server import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import Resource
from pydantic import Field
from starlette.types import ASGIApp

from lestrade.api.agents import runs
from lestrade.api.agents.runs import Refused, RunRef

__all__ = ["build_mcp_app", "PATH", "resource_uri"]

PATH = "/mcp"
INSTRUCTIONS = (
    "Lestrade investigates problems in a Kubernetes cluster with an AI agent whose tools read the "
    "cluster as the caller may. Start with search_findings (has this happened before, and what "
    "fixed it?), then investigate or ask. Calls that change the cluster wait for a person's "
    "approval; pending_approvals lists them with the kubectl command a person runs to approve."
)
MAX_RESOURCES = 200


def resource_uri(ref: RunRef) -> str:
    return f"lestrade://{ref.plural}/{ref.namespace}/{ref.name}"


def _request(ctx: Context) -> Request:  # type: ignore[type-arg]
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise ToolError("this tool is served over HTTP only")
    return request


def _as_markdown(details: dict[str, Any]) -> str:
    lines = [
        f"# {details['kind']} {details['namespace']}/{details['name']}: {details['title']}",
        f"phase: {details['phase']}; model calls: {details['steps']}; tool calls: {details['toolCallCount']}; "
        f"tokens: {details['usage']['totalTokens']}; cost: {details['usage']['cost']}",
        "",
    ]
    for title, text in (details.get("sections") or {}).items():
        lines += [f"## {title}", str(text), ""]
    if not details.get("sections"):
        lines += [str(details.get("answer") or details.get("message") or ""), ""]
    return "\n".join(lines)


def build_mcp() -> FastMCP:  # type: ignore[type-arg]
    server: FastMCP = FastMCP(  # type: ignore[type-arg]
        name="lestrade",
        instructions=INSTRUCTIONS,
        stateless_http=True,
        streamable_http_path=PATH,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    async def guarded(call: Any) -> Any:
        try:
            return await call
        except Refused as exc:
            raise ToolError(str(exc)) from None

    @server.tool(
        description="Start an Investigation of a problem (as you: your RBAC decides) and wait for its "
        "findings; progress notifications tell each step. Returns the analysis, its "
        "sections, the tool calls and the cost, or the calls waiting for a person's approval."
    )
    async def investigate(
        ctx: Context,  # type: ignore[type-arg]
        title: Annotated[
            str, Field(min_length=1, max_length=1024, description="Short name of the problem, e.g. an alert name.")
        ],
        description: Annotated[
            str | None, Field(max_length=65536, description="What is known about the problem.")
        ] = None,
        question: Annotated[str | None, Field(max_length=32768, description="An extra question to answer.")] = None,
        subject: Annotated[
            dict[str, str] | None, Field(description="What the problem is about, e.g. {kind, name, namespace}.")
        ] = None,
        namespace: Annotated[
            str | None,
            Field(max_length=63, description="Where the Investigation is created (default: the API's namespace)."),
        ] = None,
        model: Annotated[
            str | None, Field(max_length=253, description="A model name of the server's model list.")
        ] = None,
        enable_tool_approval: Annotated[
            bool, Field(description="Calls that change the cluster wait for a person (true) or are refused (false).")
        ] = True,
    ) -> dict[str, Any]:
        request = _request(ctx)

        async def progress(step: int, message: str) -> None:
            await ctx.report_progress(step, None, message)

        async def run() -> dict[str, Any]:
            ref = await runs.start_investigation(
                request,
                title=title,
                description=description,
                question=question,
                subject=subject,
                namespace=namespace,
                model=model,
                source="mcp",
                enable_tool_approval=enable_tool_approval,
            )
            await progress(0, f"started investigation {ref.namespace}/{ref.name}")
            await runs.follow(request, ref, progress)
            return {"uri": resource_uri(ref), **await runs.run_details(request, ref)}

        return await guarded(run())  # type: ignore[no-any-return]

    @server.tool(
        description="Ask Lestrade a question about the cluster (a Conversation turn, as you). Pass "
        "`conversation` (a name an earlier answer returned) to continue that conversation."
    )
    async def ask(
        ctx: Context,  # type: ignore[type-arg]
        question: Annotated[str, Field(min_length=1, max_length=32768)],
        conversation: Annotated[str | None, Field(max_length=253, description="Continue this Conversation.")] = None,
        namespace: Annotated[str | None, Field(max_length=63)] = None,
        model: Annotated[str | None, Field(max_length=253)] = None,
    ) -> dict[str, Any]:
        request = _request(ctx)

        async def progress(step: int, message: str) -> None:
            await ctx.report_progress(step, None, message)

        async def run() -> dict[str, Any]:
            ref = await runs.ask(
                request, question=question, conversation=conversation, namespace=namespace, model=model
            )
            await runs.follow(request, ref, progress)
            details = await runs.run_details(request, ref, tool_calls=False)
            turn = details["turns"][ref.turn or 0] if details.get("turns") else {}
            return {
                "conversation": ref.name,
                "namespace": ref.namespace,
                "turn": ref.turn,
                "phase": turn.get("phase"),
                "answer": turn.get("answer"),
                "pendingApprovals": details["pendingApprovals"],
                "usage": details["usage"],
            }

        return await guarded(run())  # type: ignore[no-any-return]

    @server.tool(
        description="One run (investigation or conversation): phase, analysis and sections or "
        "answers, tool calls with their output, cost, calls waiting for approval."
    )
    async def get_run(
        ctx: Context,  # type: ignore[type-arg]
        name: Annotated[str, Field(min_length=1, max_length=253)],
        namespace: Annotated[str | None, Field(max_length=63)] = None,
        kind: Annotated[str, Field(description="investigation or conversation")] = "investigation",
    ) -> dict[str, Any]:
        request = _request(ctx)

        async def run() -> dict[str, Any]:
            ref = RunRef(runs.plural_of(kind), namespace or request.app.state.namespace, name)
            return {"uri": resource_uri(ref), **await runs.run_details(request, ref)}

        return await guarded(run())  # type: ignore[no-any-return]

    @server.tool(description="Runs you may read, newest first.")
    async def list_runs(
        ctx: Context,  # type: ignore[type-arg]
        namespace: Annotated[str | None, Field(max_length=63)] = None,
        kind: Annotated[str | None, Field(description="investigation or conversation (default both)")] = None,
        phase: Annotated[str | None, Field(description="e.g. Succeeded, Failed, AwaitingApproval")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> dict[str, Any]:
        return {
            "runs": await guarded(
                runs.list_runs(_request(ctx), namespace=namespace, kind=kind, phase=phase, limit=limit)
            )
        }

    @server.tool(
        description="Past findings: finished investigations and answers you may read, by free text "
        "(ranked), involved resource (namespace/kind/name; a name also matches what it "
        "owns), alert name and time (`since`, `until`: 24h, 7d or RFC 3339). Each has "
        "the run, its age, root cause and the fix applied or approved."
    )
    async def search_findings(
        ctx: Context,  # type: ignore[type-arg]
        query: Annotated[str, Field(max_length=2000)] = "",
        namespace: Annotated[str | None, Field(max_length=63)] = None,
        kind: Annotated[
            str | None, Field(max_length=63, description="Kind of the involved resource, e.g. Deployment")
        ] = None,
        name: Annotated[str | None, Field(max_length=253)] = None,
        alert: Annotated[str | None, Field(max_length=253)] = None,
        since: Annotated[str | None, Field(max_length=64)] = None,
        until: Annotated[str | None, Field(max_length=64)] = None,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> dict[str, Any]:
        return {
            "findings": await guarded(
                runs.search_findings(
                    _request(ctx),
                    query=query,
                    namespace=namespace,
                    kind=kind,
                    name=name,
                    alert=alert,
                    since=since,
                    until=until,
                    limit=limit,
                )
            )
        }

    @server.tool(
        description="Calls waiting for a person's approval in runs you may read, each with the "
        "kubectl command that approves it. Read-only: approving stays with people."
    )
    async def pending_approvals(
        ctx: Context,  # type: ignore[type-arg]
        namespace: Annotated[str | None, Field(max_length=63)] = None,
    ) -> dict[str, Any]:
        return {"pending": await guarded(runs.pending_approvals(_request(ctx), namespace=namespace))}

    @server.resource(
        "lestrade://{plural}/{namespace}/{name}",
        mime_type="text/markdown",
        description="A finished run: its answer, sections and cost.",
    )
    async def run_resource(plural: str, namespace: str, name: str, ctx: Context) -> str:  # type: ignore[type-arg]
        try:
            details = await runs.run_details(
                _request(ctx), RunRef(runs.plural_of(plural), namespace, name), tool_calls=False
            )
        except Refused as exc:
            raise ResourceError(str(exc)) from None
        return _as_markdown(details)

    async def list_resources() -> list[Resource]:
        request = server._mcp_server.request_context.request
        if not isinstance(request, Request):
            return []
        rows = await runs.list_runs(request, limit=MAX_RESOURCES)
        return [
            Resource(
                uri=resource_uri(ref),  # type: ignore[arg-type]  # pydantic makes the AnyUrl
                name=f"{ref.namespace}/{ref.name}",
                mimeType="text/markdown",
                description=f"{row['kind']} {row['phase']}: {row['title']}",
            )
            for ref, row in zip(runs.finished_refs(rows), [r for r in rows if r["finished"]], strict=True)
        ]

    server._mcp_server.list_resources()(list_resources)  # every finished run, not a fixed list
    return server


def build_mcp_app() -> tuple[ASGIApp, AbstractAsyncContextManager[None]]:
    """The ASGI app of `/mcp`, and the session manager's lifetime (`lazy.py` runs it)."""
    server = build_mcp()
    server.streamable_http_app()  # creates the session manager
    manager = server.session_manager
    return StreamableHTTPASGIApp(manager), manager.run()
