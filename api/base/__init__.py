"""What every endpoint shares: authentication, body limits, the shared watch, following a run.

`limits` reads POST bodies as JSON whatever the Content-Type (the Robusta runner sends none,
`curl -d` says form) and refuses bodies over the size limit (413). `auth`: Kubernetes bearer
tokens (TokenReview, then SubjectAccessReview: may the caller create Investigations in the API's
namespace?), on by default in-cluster; before each write on the caller's behalf the API asks
again for that write, for a clear 403 naming what to grant; the write itself then goes *as the
caller* (Kubernetes impersonation, `Kube.acting_as`, `writer_for`), so RBAC, admission policies
and the audit log see the caller exactly as for kubectl; reads — watches, transcripts — stay the
API's own. Resources it creates as the caller carry the caller's requester annotations
(`requester_annotations`). Static API keys (`LESTRADE_API_KEYS_DIR`) authenticate automation
without a Kubernetes identity, as `X-API-Key` or `Authorization: Bearer`.

`watch`: one list+watch per kind, fanned out to every subscriber; lists paged, objects cached
without managedFields and kubectl's last-applied copy. `follow` follows one resource through it
(no watch per client) and reads its transcript once per resourceVersion for all followers
(`TranscriptCache`).
"""
