"""The Lestrade custom resources: pydantic models that are the single source of the CRDs.

    from lestrade.resources import Investigation, GROUP, VERSION, INVESTIGATION_PLURAL
    inv = Investigation.model_validate(raw_object)      # a dict from the apiserver
    inv.spec.title, inv.status.phase
    status_patch = {"status": inv.status.to_wire()}     # camelCase, unset fields omitted

`crd_manifests()` returns the CRDs as dicts, `install_crds(api_client)` applies them and waits
until they are served; `python -m lestrade.resources.generate` writes them to `crds/` and to
the chart.
"""

from lestrade.resources.common import (
    Condition,
    ConditionStatus,
    Decision,
    PendingApproval,
    ToolCall,
    TranscriptRef,
    Usage,
    WireModel,
    condition,
    find_condition,
    parse_duration,
    set_condition,
)
from lestrade.resources.constants import (
    API_VERSION,
    CATEGORY,
    CONDITION_ANSWERED,
    CONDITION_AWAITING_APPROVAL,
    CONDITION_SUCCEEDED,
    CONVERSATION_KIND,
    CONVERSATION_PLURAL,
    CONVERSATION_SHORT_NAME,
    CONVERSATION_SINGULAR,
    GROUP,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
    INVESTIGATION_SHORT_NAME,
    INVESTIGATION_SINGULAR,
    VERSION,
)
from lestrade.resources.conversation import (
    CompactionPolicy,
    ContextSettings,
    Conversation,
    ConversationPhase,
    ConversationSpec,
    ConversationStatus,
    Turn,
    TurnStatus,
)
from lestrade.resources.crd import crd_manifest, crd_manifests, crd_name
from lestrade.resources.install import install_crds, wait_established
from lestrade.resources.investigation import (
    Investigation,
    InvestigationPhase,
    InvestigationSpec,
    InvestigationStatus,
)

__all__ = [
    # names
    "GROUP",
    "VERSION",
    "API_VERSION",
    "CATEGORY",
    "INVESTIGATION_KIND",
    "INVESTIGATION_PLURAL",
    "INVESTIGATION_SINGULAR",
    "INVESTIGATION_SHORT_NAME",
    "CONVERSATION_KIND",
    "CONVERSATION_PLURAL",
    "CONVERSATION_SINGULAR",
    "CONVERSATION_SHORT_NAME",
    "CONDITION_SUCCEEDED",
    "CONDITION_AWAITING_APPROVAL",
    "CONDITION_ANSWERED",
    # shared parts
    "WireModel",
    "Condition",
    "ConditionStatus",
    "condition",
    "set_condition",
    "find_condition",
    "Decision",
    "Usage",
    "ToolCall",
    "PendingApproval",
    "TranscriptRef",
    "parse_duration",
    # Investigation
    "Investigation",
    "InvestigationPhase",
    "InvestigationSpec",
    "InvestigationStatus",
    # Conversation
    "Conversation",
    "ConversationPhase",
    "ConversationSpec",
    "ConversationStatus",
    "ContextSettings",
    "CompactionPolicy",
    "Turn",
    "TurnStatus",
    # CRDs
    "crd_manifest",
    "crd_manifests",
    "crd_name",
    "install_crds",
    "wait_established",
]
