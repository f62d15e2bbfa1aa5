"""The Lestrade HTTP API (import name `lestrade.api`; folder `api/`)."""
