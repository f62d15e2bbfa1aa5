"""Shared replicas: who is alive (Leases) and who runs which object (claims, fencing)."""
