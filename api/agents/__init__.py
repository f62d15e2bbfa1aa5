"""Lestrade for other agents: the MCP server (`/mcp`), the A2A agent (`/a2a` and its card), and
past findings (`GET /api/findings`), all acting as the caller.

- `runs.py`: what both protocols do, as plain functions of the caller's request — start an
  Investigation or a Conversation turn (reviewed by SubjectAccessReview in the target namespace,
  `base/access.py`, then written as the caller with `writer_for`), follow it with
  `holmes.runs.follow_run` to its end event and then until status agrees (the operator writes
  the transcript first), read a run (`run_summary` + `timeline`), list runs and waiting calls
  from the shared watches (only namespaces where the caller may `list`), search findings.
- `mcp_server.py`: the official SDK's FastMCP, stateless streamable HTTP; a tool gets the HTTP
  request that carried it (`ctx.request_context.request`, whose state the auth middleware
  filled); `resources/list` is replaced by a handler listing the finished runs the caller may
  read.
- `a2a_agent.py`: the A2A SDK's `DefaultRequestHandlerV2` (in-memory task store, owner = the
  authenticated user) and JSON-RPC routes with 0.3 compatibility; the executor maps a context
  to the caller's own Conversation (label `lestrade.dev/a2a-context`, set at creation) and a
  task to a turn, and follows status snapshots (working per tool call, completed with the
  answer as an artifact, failed, input-required with the waiting calls, rejected on a refusal).
- `lazy.py`: both are ASGI apps built on their first request (imports in a thread; the MCP
  session manager's lifetime in a task of its own until the app stops): their SDKs cost ~37 MiB
  an API nobody asks this way should not carry. a2a-sdk requires google-api-core but imports
  none of it: `[tool.uv] override-dependencies` keeps it, and google-auth, which the kubernetes
  client would import in every process, out.
- `findings_routes.py`: `GET /api/findings`; the index is `lestrade.runs.history`, kept by
  `base/findings.py` over the shared watches.
"""
