"""Fixtures for the scripted model server (see lestrade.modelserver)."""
