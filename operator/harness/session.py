"""Wiring an agent-harness session (a Conversation with `spec.harness`) into one attempt.

`start_session` builds what the attempt needs: the gated tools of the main agent (with the
`agent` tool for subagents, `harness_agents.py`), the limits (`maxIterations` model calls),
and the watch that relays wait on. The `rlm` mode's loop gets the same pieces
(`harness_rlm.py`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from lestrade.config import ModelConfig
from lestrade.kube import Kube
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.prompts import PromptConfig
from lestrade.operator.agent.toolcalls import CallIds
from lestrade.operator.base.budgets import Ledger
from lestrade.operator.harness.agents import Subagents
from lestrade.operator.harness.gate import MAIN_AGENT, DecisionWatch, Gate
from lestrade.operator.status.projection import ConversationProjection
from lestrade.operator.tools.base import ToolRegistry
from lestrade.resources.conversation import HarnessSettings
from lestrade.runs.transcript import RecordType, Transcript

__all__ = ["HarnessSession", "start_session"]


@dataclass
class HarnessSession:
    settings: HarnessSettings
    watch: DecisionWatch
    subagents: Subagents

    @property
    def call_ids(self) -> CallIds:
        return self.subagents.call_ids

    def main_tools(self) -> ToolRegistry:
        return self.subagents.registry_for(MAIN_AGENT)

    def limits(self, limits: Limits) -> Limits:
        """The main agent's limits: maxIterations model calls; its tools may wait for a relay
        as long as the turn lasts (each tool keeps its own limit inside the gate)."""
        return replace(
            limits,
            max_steps=self.settings.max_iterations,
            tool_timeout=max(1.0, self.subagents.deadline - time.time()),
        )

    async def aclose(self) -> None:
        await self.watch.aclose()


def start_session(
    *,
    settings: HarnessSettings,
    kube: Kube,
    namespace: str,
    name: str,
    short_name: str,
    model: ModelConfig,
    tools: ToolRegistry,
    transcript: Transcript,
    projection: ConversationProjection,
    limits: Limits,
    deadline: float,
    spec: Any,
    usage: Callable[[], tuple[int, float]],
    ledger: Ledger,
    sync: Callable[[], Awaitable[None]],
    prompt: PromptConfig,
    progress: Callable[[], None],
) -> HarnessSession:
    watch = DecisionWatch(kube, namespace, name)
    hint = (
        f"kubectl patch {short_name} {name} -n {namespace} --type merge -p "
        '\'{"spec":{"decisions":{"<id>":{"approved":true}}}}\''
    )
    gate = Gate(
        transcript=transcript,
        projection=projection,
        settings=settings,
        watch=watch,
        sync=sync,
        kubectl_hint=hint,
    )
    state = transcript.state
    known = {
        str(part.get("id"))
        for record in state.records
        if record["t"] == RecordType.MESSAGE
        for part in (record["message"].get("tool_calls") or [])
    }
    subagents = Subagents(
        model=model,
        base=tools,
        gate=gate,
        settings=settings,
        transcript=transcript,
        limits=limits,
        deadline=deadline,
        spec=spec,
        usage=usage,
        ledger=ledger,
        namespace=namespace,
        sync=sync,
        prompt=prompt,
        tool_timeout=limits.tool_timeout,
        call_ids=CallIds(known | state.started | set(state.decisions)),
        progress=progress,
    )
    return HarnessSession(settings, watch, subagents)
