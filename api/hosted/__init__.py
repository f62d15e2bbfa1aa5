"""The hosted chat API (reference 002): accounts, clusters and its SSE events.

`routes`: `POST /api/holmes/{account_id}/chat` creates a Conversation with one turn (like
`/api/chat`), with the alert `payload` (quoted as data), the cluster name and
`additional_system_prompt` in `spec.systemPrompt`. `accounts`: the account and the cluster names
(`LESTRADE_ACCOUNT_ID`; `LESTRADE_CLUSTER_NAMES`, else `LESTRADE_CLUSTER_NAME`, else `default`)
and 002's resolution order. `events` (pure) maps the turn's HolmesGPT events onto 002's payloads.
Not matched on purpose: the cluster is not extracted "by AI" (a word match on configured names:
hostile text cannot name a cluster that is not configured); approvals are asked for in stream
mode only and resumed through `/api/chat`'s `tool_decisions`; error bodies are `{"detail", ...}`.
"""
