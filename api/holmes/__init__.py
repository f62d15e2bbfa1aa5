"""HolmesGPT's API (references 000 and 001): chat, investigate, their events and SSE streams.

`routes_chat`: `/api/model`, `/api/chat` (JSON or `stream: true`), `/api/stream/chat`,
`/api/issue_chat`, `/api/stream/issue_chat`, `/api/workload_health_chat`; `routes_investigate`:
`/api/investigate`, `/api/stream/investigate`, `/api/workload_health_check` (Investigations with
`enableToolApproval: false`, HolmesGPT's server mode). `schemas`: request and response bodies
(422 names the field). `services`: what the endpoints share, one per app, on `app.state`.
`routes_info`: `GET /api/info` (version, auth, model names, toolsets and their health).
`workload`: the JSON verdict `/api/workload_health_check` answers (`workload_healthy`,
`root_cause_summary`), asked as sections and structured output, checked here. `requests`:
`metadata.request_id` / `X-Request-Id` on every JSON answer, 429 + `Retry-After` for a
rate-limited run.

`chats` maps stateless clients onto Conversations: a new chat creates one (`chat-<random>`);
every history the API returns carries `conversation_id` in its system message, so a follow-up
that resends the history appends a turn to the same Conversation (as does `conversation_id`:
a Conversation's name, or the client's own id recorded when it started the chat). The request
fields `user_id`, `user_email`, `request_source`, `source_ref`, `meta` become annotations of
the Conversation (the client's claims). A resume-only request (`ask` empty, with
`tool_decisions` or `frontend_tool_results`) adds no turn. Nothing else in a client's
history is trusted: a history the server never issued only goes along as quoted text in the
first ask (never as messages, so it cannot carry tool calls). `tool_decisions` patch
`spec.decisions`, and only for calls the server's transcript holds as waiting in the current
turn; the call that then runs is the stored one, bound to its digest (spec.decisions[].digest),
which `pending_approvals[].ticket` shows and a decision's `ticket` must match when sent. A new
question while calls wait denies them.

`events` (pure): progress records → HolmesGPT events and response fields (assistant message →
`ai_message` + `start_tool_calling` per call; tool message → `tool_calling_result`;
`approval_needed` → `tool_calling_result` (approval_required) + `approval_required`; `tokens` →
`token_count`; `compaction` → `conversation_history_compaction_start` +
`conversation_history_compacted`; `answer` → `ai_answer_end`; `error` → `error`, 5204 for rate
limits). `runs` follows one run (an Investigation, or one Conversation turn) from a position to
its end; `hosted` and `harness` build on these events too.

`sse`, `streams`: event ids are `conv|inv/<name>/<seq>[.<n>]`, so a reconnect with
`Last-Event-ID` gets exactly the rest from any replica. Keep-alives are a bare comment line
without a blank line (`fetch-event-source` dispatches a message on every blank line). JSON
endpoints wait for the run's end, and stop waiting when the client hangs up or after
`LESTRADE_API_WAIT_TIMEOUT` (504 naming the run).

Not matched on purpose: `conversation_history` is not replayed (the transcript is the history),
`follow_up_actions` and `instructions` are always empty, `include_tool_call_results: false`
keeps the calls but drops their `data`; responses carry one extra field, `conversation_id` (or
`investigation`). A frontend tool named like one of the operator's tools fails the turn (an
`error` event), not a 400: the API does not know the operator's tool registry.
"""
