"""How a run shows in its resource's status: the projection per kind and the coalesced writer.

`projection` is the only place that knows where a kind's progress lands in status
(Investigation: phase, analysis, sections, toolCalls; Conversation: `turns[i]`, `version`, the
latest turn's toolCalls); it writes through the resource models and takes every count from the
transcript (`lestrade.runs.progress.run_facts`), so a resumed or settled resource always says
what its transcript says. `writer` coalesces status patches of one resource.
"""
