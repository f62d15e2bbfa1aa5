"""The operator: Kopf handlers that run the agent engine for every Investigation and Conversation.

The edge: `__main__` (the process: settings, admission policies, Kopf), `job` (the pod of one
Job-mode round), `handlers` (which Kopf handlers exist and what each delegates to) and `context`
(builds the process's shared `Engine` from its settings). Under it, by concern: `runs` (the
life of a run), `harness` (reference 003 inside an attempt), `status`, `replicas`, `triggers`,
`admission`, `tenancy`, `base` (settings, engine, metrics, Events, budgets); then the engine
(`agent`, `rlm`) and the `tools`. Imports only go down that list (pyproject.toml's contracts).
"""
