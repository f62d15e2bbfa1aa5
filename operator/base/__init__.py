"""What every part of the operator stands on: settings, the engine, metrics, Events, budgets.

`settings` (environment variables the chart sets, or flags); `engine` (what every run of one
process shares: API access, settings, models, the tool registry); `metrics` (the operator's
Prometheus metrics: runs, model calls, tokens, tools, approvals; served on
`LESTRADE_METRICS_PORT`; the request layer's and the API's are in `lestrade.metrics`);
`recorder` (Kubernetes Events for a run's milestones); `budgets` (the per-run limits
`spec.maxTokens`/`maxCost`, checked after each model call that asked for tools, and the
per-namespace spend ledger: ConfigMap `lestrade-spend-<ns>` in the operator's namespace, updated
with resourceVersion preconditions, checked before a run starts and after each model call).
"""
