"""MCPServer resources: the operator connects to each, lists its tools and keeps status.

`daemon` runs a Kopf daemon per MCPServer (no finalizer: nothing outside the process needs
cleaning) doing rounds of `reconcile`: read the headers' Secrets (only those labelled
`lestrade.dev/mcp-credentials=true`), list the tools (`tools/mcp/client.py`), apply filters and
approval policy (`tools/mcp/catalog.py`), write status (`Ready`, tools with hints and approval,
skipped tools, lastError, observedGeneration) and keep the engine's `McpHub` current. A Ready
server is listed again every `LESTRADE_MCP_REFRESH` seconds, a failing one sooner, a changed
spec at once. The attempt adds the toolsets of the run's namespace's servers and of those the
scope policy's `mcpServers` share with it (`tenancy/scopes.py`). A Job's pod has no daemons:
`job.py` gives the hub a loader (`reconcile.load_for_run`, Kopf-free) that lists the run's
servers once, without writing status.
"""
