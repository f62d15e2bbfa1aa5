"""The hosted chat API (reference 002): accounts, clusters and its SSE events."""
