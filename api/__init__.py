"""The Lestrade HTTP API (import name `lestrade.api`; folder `api/`).

The API runs no agent: every request becomes a resource, the operator runs it, and the API
answers or streams from what the resource and its transcript say. So `kubectl get conv,inv`
shows every chat and investigation, any replica can serve any stream, and a client that
disconnects does not cancel anything.

`app` builds the application and mounts one package per reference document — `holmes` (000 and
001, the chat core the others build on), `hosted` (002), `harness` (003), `contexts` (004) —
plus `console` and `alertmanager`; `base` is what every endpoint shares.
"""
