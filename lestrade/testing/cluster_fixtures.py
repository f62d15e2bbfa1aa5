"""Fixtures for the local control plane (see lestrade.localcluster)."""
