"""Every `lestrade.dev/*` label, annotation and finalizer Lestrade writes or reads, in one place.

They are part of the wire (README "Labels and annotations"): a selector in the chart, an
admission policy or a user's `kubectl get -l` depends on each spelling, so none is spelled twice.
`tests/test_keys.py` fails when a `"lestrade.dev/..."` literal appears anywhere else in the code.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "lestrade.dev/"
"""What every key below starts with (a pod's simulation keys are dropped by it)."""

# -- who asked, and for what (stamped by admission: lestrade.operator.admission.requester) ------
REQUESTED_BY_ANNOTATION: Final = "lestrade.dev/requested-by"
"""The creator's user name, recorded by the cluster: a run reads with its creator's scope."""
REQUESTER_GROUPS_ANNOTATION: Final = "lestrade.dev/requester-groups"
"""The creator's groups (comma-separated), recorded beside the name."""
ENDPOINT_ANNOTATION: Final = "lestrade.dev/endpoint"
"""The API endpoint that created a run (the console and metrics tell chat from investigate)."""

# -- runs --------------------------------------------------------------------------------------
FINALIZER: Final = "lestrade.dev/run"
"""Kopf's finalizer on a run: its Job (Job mode) is cleaned up before it goes."""
RUN_ANNOTATION: Final = "lestrade.dev/run"
"""On a Job's pod: `<kind>/<namespace>/<name>` of the run it executes."""
RUN_UID_LABEL: Final = "lestrade.dev/run-uid"
"""On a run's Job: the run's uid (one Job per attempt; listing by it finds them)."""
IDLE_LABEL: Final = "lestrade.dev/idle"
"""On a Conversation with nothing to answer: the operator's watch leaves it out."""
OWNER_ANNOTATION: Final = "lestrade.dev/owner"
"""Shared replicas: `<lease>/<uid>/<epoch>` of the replica that runs the object."""
REPLICAS_LABEL: Final = "lestrade.dev/replicas"
"""On each replica's Lease: the group of replicas that share the work."""
TRANSCRIPT_LABEL: Final = "lestrade.dev/transcript-of"
"""On a transcript chunk (ConfigMap): the uid of the run it belongs to."""
TRANSCRIPT_CHUNK_LABEL: Final = "lestrade.dev/transcript-chunk"
"""On a transcript chunk: its index, so the chunks are read in order."""
TRANSCRIPT_AUTHOR_ANNOTATION: Final = "lestrade.dev/transcript-author"
"""On a transcript chunk a user wrote (not Lestrade): that user, kept truthful by admission;
readers take such a chunk only into the history of a run that same user created."""

# -- the context store (reference 004) ---------------------------------------------------------
CONTEXT_LABEL: Final = "lestrade.dev/context"
"""On a context-store Conversation: the context's id."""
CONTEXT_UPDATED_ANNOTATION: Final = "lestrade.dev/context-updated-at"
"""When a context was last written (each write changes it, so admission sees every write)."""
CONTEXT_WRITE_ANNOTATION: Final = "lestrade.dev/context-write"
"""The user a context-store write was made as (only its creator may append)."""
A2A_CONTEXT_LABEL: Final = "lestrade.dev/a2a-context"
"""On a Conversation an A2A task runs in: the A2A context id."""

# -- triggers ----------------------------------------------------------------------------------
ALERT_ROUTE_LABEL: Final = "lestrade.dev/alert-route"
"""On an Investigation an alert started: the AlertRoute that matched."""
ALERT_FINGERPRINT_LABEL: Final = "lestrade.dev/alert-fingerprint"
"""On an Investigation an alert started: the alert's fingerprint (one run per firing)."""
ALERT_STARTS_AT_ANNOTATION: Final = "lestrade.dev/alert-starts-at"
"""The alert's `startsAt`: a new firing of the same alert is a new run."""
ALERT_RESOLVED_ANNOTATION: Final = "lestrade.dev/alert-resolved-at"
"""When Alertmanager said the alert resolved."""
SCHEDULED_BY_LABEL: Final = "lestrade.dev/scheduled-by"
"""On an Investigation a ScheduledInvestigation created: the schedule's name."""
SCHEDULED_AT_ANNOTATION: Final = "lestrade.dev/scheduled-at"
"""The scheduled time it stands for (one run per time, whoever creates it)."""

# -- tools, tenancy, spend ---------------------------------------------------------------------
RUNBOOK_LABEL: Final = "lestrade.dev/runbook"
"""`true` on a ConfigMap in a runbook namespace: its data are runbooks."""
TOOLS_SCOPE_LABEL: Final = "lestrade.dev/tools-scope"
"""On a per-scope tools ServiceAccount and its RoleBindings: the scope's key."""
SCOPE_NAMESPACES_ANNOTATION: Final = "lestrade.dev/namespaces"
"""On a per-scope tools ServiceAccount: the namespaces it reads."""
LAST_USED_ANNOTATION: Final = "lestrade.dev/last-used"
"""On a per-scope tools ServiceAccount: when a run last used it (idle ones are deleted)."""
SPEND_LIMIT_ANNOTATION: Final = "lestrade.dev/spend-limit"
"""On a Namespace: its spend limit, e.g. `tokens=500000,cost=20,window=24h`."""
SPEND_LEDGER_LABEL: Final = "lestrade.dev/spend-ledger"
"""`true` on a namespace's spend ledger (a ConfigMap in the operator's namespace)."""
LEDGER_NAMESPACE_ANNOTATION: Final = "lestrade.dev/namespace"
"""On a spend ledger: the namespace whose spend it counts."""
MCP_CREDENTIALS_LABEL: Final = "lestrade.dev/mcp-credentials"
"""On a Secret an MCPServer's headers come from: the operator may read only such Secrets."""
DESTINATION_SECRET_LABEL: Final = "lestrade.dev/destination"
"""On a Secret a Destination's URL or key comes from: the operator may read only such Secrets."""

# -- the local control plane and the scenarios (KWOK's simulated pods) --------------------------
SIMULATE_ANNOTATION: Final = "lestrade.dev/simulate"
"""On a pod under KWOK: the state it shows (`crashloop`, ...; lestrade/localcluster/stages.yaml)."""
SIMULATED_STATUS_ANNOTATION: Final = "lestrade.dev/status"
"""On a pod under KWOK: a whole pod status to show (the scenarios)."""
LOGS_ANNOTATION: Final = "lestrade.dev/logs"
"""On a pod under KWOK: what `kubectl logs` shows."""
PREVIOUS_LOGS_ANNOTATION: Final = "lestrade.dev/previous-logs"
"""On a pod under KWOK: what `kubectl logs --previous` shows."""
EVAL_LABEL: Final = "lestrade.dev/eval"
"""On what a scenario created: the scenario's name (removed together)."""
TEST_NAMESPACE_LABEL: Final = "lestrade.dev/test"
"""On a namespace a test created (left-overs are easy to find)."""
