"""The agent-harness chat API (reference 003): requests, relays and harness events.

`routes`: `POST /chat` checks the body (`requests`: 003's `{"error"}` bodies; `model` must be a
modelList name or an entry's `provider/model` id), creates a Conversation `harness-<random>` *as
the caller* with `spec.harness`, and streams `connected{sessionId}` then the events `events`
(pure) derives from the turn's transcript records — so any replica, before or after a restart
of either process, streams the same events. `POST /chat/relay/{relayId}` (`relay`) writes the
answer into `spec.decisions` as the caller, with the resourceVersion it read; `always: true`
adds `{tool}` to the allowlist in the same write. The operator's side is
`lestrade.operator.harness`.

Not matched on purpose: `text` and `reasoning` come once per model message, not as token chunks;
`tool_call` is sent when the model asks, before the permission check; without `permissions`
every call relays; `agent` is the only harness tool besides the operator's own; a stream cannot
be resumed with `Last-Event-ID`.
"""
