"""The operator: Kopf handlers that run the agent engine for every Investigation and Conversation.

`handlers.py` wires Kopf to `supervisor.py` (admission, approvals, deadline), which hands each
round to `attempt.py` (one resumable attempt: transcript first, then act) or, in Job mode, to
`jobs.py`. `projection.py` says where a kind's progress lands in its status. `python -m
lestrade.operator` runs it; `python -m lestrade.operator.job` runs one attempt in a Job.
"""
