"""The context window, as pure functions both the operator and the API use.

A Conversation's model input is its transcript's working messages (the latest compaction, then
what followed) shrunk by its compaction policy when it passes its budget. The operator computes
that before every model call; the context-store API (reference 004) reports it. Both call the
code here, so what `GET /v1/contexts/:id/context` shows is what the model gets next.
"""
