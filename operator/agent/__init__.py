"""The agent engine: a tool-calling loop over litellm, prompts, tokens and the context window.

Usable without Kopf:

    agent = Agent(model_config, registry, PromptConfig(sections=DEFAULT_SECTIONS), Limits())
    messages = agent.initial_messages(InvestigationRequest(title="Pod web-1 crashloops"))
    async for event in agent.run(messages):
        ...  # MessageAdded, ToolStarted, ToolResult, TokenCount, ...
    # the last event is exactly one of Answer, ApprovalNeeded, AgentError

Resume after a pause or a crash with the stored transcript:
`agent.run(stored_messages, decisions={call_id: Decision(True, digest=pending.digest)},
started_call_ids={...})` (the digest `ApprovalNeeded` reported binds the decision to the call).

`loop` (Agent.run, an async generator of `events`) → `turn` (one turn's tool calls, approvals,
resume) → `model` (litellm call with bounded retries, litellm imported in a thread at first
use); `prompts` / `prompt_text` (switchable sections, `ENABLED_PROMPTS`), `answer` (sections
parser), `tokens` / `window` (counting, truncation, compaction), `guard` (loop guard),
`structured` (a `response_format` asked in words where the provider lacks it; the answer checked).

Approvals are bound to one call (`toolcalls`): every tool call gets an id unique within the run
(the provider's when well-formed and never used in the run, else a fresh random one; stored in
the assistant message, so stable across a resume), and a `sha256:` digest of its name and exact
arguments. A decision is applied only to the call whose id *and* digest it carries, otherwise
the call is not run (an error result says why).
"""

from lestrade.operator.agent.answer import format_answer, parse_sections, render_sections
from lestrade.operator.agent.events import *  # noqa: F403 (the event contract)
from lestrade.operator.agent.events import __all__ as _event_names
from lestrade.operator.agent.limits import Limits
from lestrade.operator.agent.loop import Agent, Decision
from lestrade.operator.agent.prompts import (
    DEFAULT_SECTIONS,
    SECTION_KEYS,
    InvestigationRequest,
    PromptConfig,
    enabled_sections,
    first_call_tokens,
    system_prompt,
    user_prompt,
)
from lestrade.operator.agent.tokens import (
    BREAKDOWN_KEYS,
    ContextLimits,
    context_limits,
    count_messages,
    count_text,
    token_breakdown,
)
from lestrade.operator.agent.window import TRUNCATION_MARKER

__all__ = [
    *_event_names,
    "Agent",
    "Decision",
    "Limits",
    "PromptConfig",
    "InvestigationRequest",
    "DEFAULT_SECTIONS",
    "SECTION_KEYS",
    "enabled_sections",
    "system_prompt",
    "user_prompt",
    "first_call_tokens",
    "parse_sections",
    "render_sections",
    "format_answer",
    "BREAKDOWN_KEYS",
    "ContextLimits",
    "context_limits",
    "count_text",
    "count_messages",
    "token_breakdown",
    "TRUNCATION_MARKER",
]
