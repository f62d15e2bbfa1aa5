"""Shared replicas: who is alive (Leases) and who runs which object (claims, fencing).

With `--replicas shared` (`LESTRADE_REPLICAS=shared`; the chart's default, not in Job mode)
every replica has the run daemon of every object with work, but only the object's *owner*
supervises it.

`membership`: each replica holds a coordination.k8s.io Lease `<group>-<replica>` (labelled
`lestrade.dev/replicas=<group>`, in the operator's namespace), renewed every `renew_interval`;
another replica is dead once its Lease's `renewTime` has not changed for `leaseDurationSeconds`
on the *observer's* monotonic clock (no clocks compared), or once the Lease is gone (deleted on
a clean stop; dead Leases are deleted after twice the duration). Before calling a holder dead
the observer reads its Lease again (at most 1 s old), so a replica whose own loop stalled never
takes work from one that kept renewing.

`ownership`: the claim is the annotation `lestrade.dev/owner: <lease>/<lease uid>/<epoch>`,
written as a merge patch carrying the resourceVersion read, so of two claims exactly one wins.
A replica claims an object only when the claim is free or its holder is dead (or of an older
epoch, or a re-created Lease), and only while its owned objects not waiting for a decision plus
claims in flight are below its concurrency; among replicas with room the object's
rendezvous-hash favourite claims first and the others wait `claim_handoff` (0.5 s) or until the
object changes. Waiting daemons wake on the object's changes, on room made locally and on
membership changes. Nothing is released on a death: each survivor notices it from the Leases.

Failure modes. *Owner killed*: after the lease duration (+ up to one renew interval) another
replica claims each of its objects and resumes it from the transcript as a restarted operator
would. *Clean stop*: the runs stop, then the Lease is deleted, so the others take over at their
next look. *Owner cut off* (cannot renew, or a 409 on its Lease): after `renew_deadline` it
*fences* — its runs are cancelled — and its epoch is burned, so its old claims never revive.
Residual risks: a write already sent when the fence fires (transcript and status writes carry
no precondition) can land after another replica took over if the stop takes longer than the
margin between renew deadline and lease duration; a blocking tool call in a thread cannot be
cancelled. *Claim rewritten* by hand: the owner stops the run when the watch shows a claim newer
than its own naming someone else. ScheduledInvestigation daemons and the Event source run on
every replica: their children have deterministic names (the apiserver's 409 is the dedup).
`standby` mode (Kopf peering, one replica works) stays for Job mode.

Scaling (`bench/replicas_bench.py`): two replicas help only when one replica's process is the
bottleneck and a spare core is there for the second; on a 2-core machine they were slower.
"""
