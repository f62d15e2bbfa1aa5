"""What every process knows about a run: its transcript, progress, summary and views.

`transcript` is an append-only log of numbered records in ConfigMaps owned by the resource:
messages, tool starts (written before the tool runs), tool results, approvals needed, decisions
acted upon, token counts, compactions, Conversation turn starts, answers, errors. The record
numbers are the progress sequence the API streams (`progress.progress_records(state,
after=seq)`): gap-free, the same for every reader, rebuilt from the ConfigMaps alone.
`progress` derives progress records and status facts from a transcript; `summary` what a person
is shown of a run (a list row and a timeline, for the plugin and the console); `views` typed
views of a run's resource; `findings` the conclusions of an answer with the tool calls they cite
(`[evidence: id]`), checked against the run's calls (status `findings`, the console, the eval).
"""
