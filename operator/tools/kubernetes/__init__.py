"""The read-only Kubernetes tools: API access, kubectl-like rendering, sanitizing.

`toolset` holds the tools, named like HolmesGPT's; `api` is a small async read-mostly view of the
Kubernetes API (`ScopedKubeApi` fans cross-namespace lists out over a run's scope); `describe`
and `format` render like kubectl; `sanitize` removes Secret values and noise before a model sees
an object.
"""
