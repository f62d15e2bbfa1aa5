"""The read-only Kubernetes tools: API access, kubectl-like rendering, sanitizing."""
