"""Shared fixtures for tests/ and e2e/ come from the plugins in `lestrade.testing`
(see docs/ARCHITECTURE.md)."""

pytest_plugins = [
    "lestrade.testing.cluster_fixtures",
    "lestrade.testing.model_fixtures",
    "lestrade.testing.mcp_fixtures",
]
