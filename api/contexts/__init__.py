"""The context store (reference 004): contexts are Conversations, messages are transcript records.

`routes` (400s naming the field, the `{"error", "message"}` shape, `/health/live` and
`/health/ready`) and `store`. A context *is* a Conversation: `PUT` creates it or replaces
`spec.context`, `PATCH .../metadata` merges into `spec.context.metadata`, `DELETE` sets
`spec.tombstoned`. The log is the transcript's `message` records, so `seq` and `version` are the
same whether a message came through `/v1`, a chat endpoint or `spec.turns`. `messages`: an
appended message's parts (text, tool_call, tool_result, reasoning) and the chat message the
model gets on the next turn. `GET .../context` runs `lestrade.context.window.plan_window` — the
operator's code. Writes are optimistic (each carries the chunk ConfigMap's resourceVersion), so
concurrent appends from several API processes never lose, duplicate or misnumber a message.
Not matched on purpose: while a turn is pending, running or waiting for approval, appends and
compactions get 409 `conflict`; no 429 rate limiting; ids must be Conversation names.
"""
