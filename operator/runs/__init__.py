"""The life of a run inside the operator: supervision, attempts, Job mode, TTL, its context window.

One pipeline serves both kinds. `lestrade.operator.handlers` registers the same Kopf handlers
for Investigations and Conversations: a daemon per resource with work (`RunView.has_work()`: an
unfinished Investigation, a Conversation with a turn to answer) runs `supervisor` (admission to
a concurrency slot shared by both kinds, the approval gate, the deadline of the run or turn),
which hands each round to `attempt` (one resumable attempt: transcript first, then act) or, in
Job mode, to `jobs` (one Job per spec generation; `lestrade.operator.job` is the pod's
entrypoint, `--kind`). `context_window` maps a Conversation's `spec.context` onto the engine's
limits (the policy itself is `lestrade.context.window.policy_of`, which the context store uses
too).

`ttl` deletes finished Investigations after `ttlSecondsAfterFinished` (a watch of its own that
asks only for finished Investigations with a TTL; started before Kopf and stopped by a Kopf
cleanup activity, since Kopf waits 5 s for "hung" tasks it did not create before cancelling
them). `selection` makes Kopf list and watch only unfinished Investigations (a field selector
on the CRD's selectable field `status.phase`; lists paged), so finished ones cost the operator
nothing — one that finishes leaves the watch as a DELETED event, which stops its daemon; a CEL
rule keeps a finished phase final (Job mode keeps the full watch: Kopf removes its finalizer
from finished objects; with an older CRD that cannot select by phase — read at start — both
watches fall back to whole objects). `stopping` makes a daemon stop its run as soon as Kopf
asks, so `kubectl delete` of a running object finishes at once.

A Conversation's daemon stops when every turn is settled; appending a turn changes the spec and
starts a new daemon. In-process, run daemons carry no Kopf finalizer: the event handler sees
the DELETED watch event and stops the daemon (`Feeds.deleted`, `stopping`); in Job mode the
finalizer stays, so the run's Jobs are deleted before the object goes. A turn that ends with
calls still open (timeout, failure) has them closed as "not run" when the next turn starts, so
a later turn can never run them.
"""
