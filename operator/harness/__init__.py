"""Agent-harness sessions (reference 003) inside an attempt: permission gate, subagents, rlm mode.

`lestrade.operator.runs.attempt` hands a Conversation with `spec.harness` to `session`, which
wraps every tool of the run (`gate.GatedTool`) and adds the `agent` tool (`agents`). Each call
asks the session's `Gate`: a `deny` rule by call id, else an `allowlist` rule, else an unused
`allowOnce` rule (spent; the `decision` record names the rule, so it stays spent across
restarts), else a *relay*: an `approval_needed` record listing every waiting call, status
`pendingApprovals`/`AwaitingApproval`, and a wait *inside the attempt* on a watch of that one
Conversation (`DecisionWatch`) — so a subagent's relay pauses only that subagent. Rules are
read from the newest spec seen.

The `agent` tool runs a child `Agent` in the same turn with the same gated tools (never
frontend tools), `maxIterations` model calls, refused as a tool error from depth `maxDepth`;
its tokens are `tokens` records of the turn, so `spec.maxTokens`/`maxCost` and the namespace
ledger bound parent and children together. All agents of a session share one call-id space
(`Agent(call_ids=...)`), since relays and decisions are keyed by call id; a subagent stores its
records at each step and moves status, because the API reads the transcript when the object
changes.

`mode: rlm` runs `lestrade.operator.rlm.run_rlm` instead of the agent (`rlm`): its model calls
are `tokens` records (budgets hold), the tools its code calls go through the same `Gate` (a
refusal is `ToolDenied` in the code), `llm_query` is refused past `maxDepth`, and every event of
the loop is an `agent` record with `event: emit`, which the API passes on with the run's ids.
The loop's own conversation is not stored: an attempt resumed after a restart runs it again
from the question unless its answer is recorded (spent rules and decisions stay spent). A call
is stored as started before its gate decides, so on a resumed attempt a started call without an
approving `decision` record never ran: it goes through the gate again. A subagent running when
the operator stops is not resumed: its parent is told it was stopped by the restart, with what
it had done and written (`agents.py`), and the relays it waited for are withdrawn. Residual: the
token count of a model call whose tools were interrupted is not recorded.
"""
