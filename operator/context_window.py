"""A Conversation's `spec.context` as the engine's limits: budget, trigger and policy.

The context-store settings (reference 004) map one to one: `tokenBudget` is the window the
engine keeps the history in, `triggerRatio` the share of it at which compaction starts, and
`compaction` the policy (`last_n`, `skip_parts`, `manual`; the default is a model-written
summary). Compaction only changes what the model sees: every raw message stays in the
transcript.
"""

from __future__ import annotations

import dataclasses

from lestrade.operator.agent.limits import Limits
from lestrade.resources.conversation import ContextSettings

__all__ = ["limits_for", "DEFAULT_KEEP"]

DEFAULT_KEEP = 20
"""Messages `last_n` and `skip_parts` keep whole when the policy gives no limit."""


def limits_for(context: ContextSettings | None, limits: Limits) -> Limits:
    if context is None:
        return limits
    changes: dict[str, object] = {"compaction_ratio": context.trigger_ratio}
    if context.token_budget:
        changes["context_window"] = context.token_budget
    policy = context.compaction
    if policy is not None:
        changes["compaction_policy"] = policy.policy
        changes["compaction_keep"] = policy.limit or DEFAULT_KEEP
        changes["compaction_skip_kinds"] = tuple(policy.skip_kinds or ())
    return dataclasses.replace(limits, **changes)
