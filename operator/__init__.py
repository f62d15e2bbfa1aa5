"""The Investigation operator: Kopf handlers that run the agent engine for every Investigation.

`handlers.py` wires Kopf to `supervisor.py` (admission, approvals, deadline, Jobs), which hands
each run to `runner.py` (one resumable attempt: transcript first, then act). `python -m
lestrade.operator` runs it; `python -m lestrade.operator.job` runs one Investigation in a Job.
"""
