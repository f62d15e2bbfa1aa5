"""The admission policies the operator installs: decisions and who asked.

`decisions` installs the ValidatingAdmissionPolicy that rejects decisions for call ids that are
not pending (both kinds). `requester` installs the policies that record the creator
(`lestrade.dev/requested-by`, `-groups`: a MutatingAdmissionPolicy writes them, a
ValidatingAdmissionPolicy refuses forged or changed values, and new Conversation turns from
anyone but the creator); `transcripts` the one that lets only Lestrade or a chunk's own author
change a transcript chunk. They print their manifests with `python -m`, which the chart's
templates are (tests compare them); `validating` holds what the validating policies share.
"""
