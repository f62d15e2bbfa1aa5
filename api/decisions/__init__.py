"""Signed decision links of generic webhooks (`routes.py`; the token: `lestrade.decision_links`)."""
