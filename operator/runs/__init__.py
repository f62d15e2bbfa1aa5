"""The life of a run inside the operator: supervision, attempts, Job mode, TTL, its context window."""
