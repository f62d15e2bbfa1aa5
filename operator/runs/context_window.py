"""A Conversation's `spec.context` as the engine's limits: budget, trigger and policy.

The context-store settings (reference 004) map one to one: `tokenBudget` is the window the
engine keeps the history in, `triggerRatio` the share of it at which compaction starts, and
`compaction` the policy (`last_n`, `skip_parts`, `manual`; the default is a model-written
summary). Compaction only changes what the model sees: every raw message stays in the
transcript.
"""

from __future__ import annotations

import dataclasses

from lestrade.context.window import DEFAULT_KEEP, policy_of
from lestrade.operator.agent.limits import Limits
from lestrade.resources.conversation import ContextSettings

__all__ = ["limits_for", "DEFAULT_KEEP"]


def limits_for(context: ContextSettings | None, limits: Limits) -> Limits:
    if context is None:
        return limits
    changes: dict[str, object] = {"compaction_ratio": context.trigger_ratio}
    if context.token_budget:
        changes["context_window"] = context.token_budget
    if context.compaction is not None:
        plan = policy_of(context)
        changes["compaction_policy"] = plan.policy
        changes["compaction_keep"] = plan.keep
        changes["compaction_skip_kinds"] = plan.skip_kinds
    return dataclasses.replace(limits, **changes)  # type: ignore[arg-type]
