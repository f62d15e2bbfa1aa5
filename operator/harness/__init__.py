"""Agent-harness sessions (reference 003) inside an attempt: permission gate, subagents, rlm mode."""
