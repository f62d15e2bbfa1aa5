"""Approvals from the thread: Slack's interaction callbacks for the Approve/Deny buttons the
operator's Slack messages carry (`routes.py`), checked by Slack's request signature
(`signature.py`) and decided as the Kubernetes identity the Slack user is mapped to (`users.py`)."""
