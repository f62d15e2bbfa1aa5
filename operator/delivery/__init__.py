"""Delivery of run results to Destinations (issue 25): what is due (`due.py`), the messages
(`payload.py`: the versioned JSON of the generic webhook; `slack.py`: Block Kit; `teams.py`:
an Adaptive Card), signing (`signing.py`), one send (`send.py`) and the watch that sends each
due message exactly once and records it in the run's `status.deliveries` (`watch.py`).

The model never sends anything: the operator does, from what the run's status says once a run
(or a Conversation's turn) ends or pauses for approval. Nothing here imports Kopf.
"""
