"""Names of the Lestrade API: group, version, kinds, plurals.

They live in one module so the operator's Kopf handlers, the API's client calls and the CRD
generator can never disagree about a spelling (a typo in a plural is a 404 at runtime, not an
import error).
"""

from __future__ import annotations

from typing import Final

__all__ = [
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
    "ALERTROUTE_KIND",
    "ALERTROUTE_PLURAL",
    "ALERTROUTE_SINGULAR",
    "ALERTROUTE_SHORT_NAME",
    "SCHEDULED_KIND",
    "SCHEDULED_PLURAL",
    "SCHEDULED_SINGULAR",
    "SCHEDULED_SHORT_NAME",
    "MCPSERVER_KIND",
    "MCPSERVER_PLURAL",
    "MCPSERVER_SINGULAR",
    "MCPSERVER_SHORT_NAME",
    "CONDITION_READY",
    "CONDITION_SUCCEEDED",
    "CONDITION_AWAITING_APPROVAL",
    "CONDITION_ANSWERED",
]

GROUP: Final = "lestrade.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CATEGORY: Final = "lestrade"

INVESTIGATION_KIND: Final = "Investigation"
INVESTIGATION_PLURAL: Final = "investigations"
INVESTIGATION_SINGULAR: Final = "investigation"
INVESTIGATION_SHORT_NAME: Final = "inv"

CONVERSATION_KIND: Final = "Conversation"
CONVERSATION_PLURAL: Final = "conversations"
CONVERSATION_SINGULAR: Final = "conversation"
CONVERSATION_SHORT_NAME: Final = "conv"

ALERTROUTE_KIND: Final = "AlertRoute"
ALERTROUTE_PLURAL: Final = "alertroutes"
ALERTROUTE_SINGULAR: Final = "alertroute"
ALERTROUTE_SHORT_NAME: Final = "ar"

SCHEDULED_KIND: Final = "ScheduledInvestigation"
SCHEDULED_PLURAL: Final = "scheduledinvestigations"
SCHEDULED_SINGULAR: Final = "scheduledinvestigation"
SCHEDULED_SHORT_NAME: Final = "sinv"

MCPSERVER_KIND: Final = "MCPServer"
MCPSERVER_PLURAL: Final = "mcpservers"
MCPSERVER_SINGULAR: Final = "mcpserver"
MCPSERVER_SHORT_NAME: Final = "mcp"

# Condition types the operator maintains (the GUIDE promises `kubectl wait
# --for=condition=Succeeded` on an Investigation).
CONDITION_SUCCEEDED: Final = "Succeeded"
CONDITION_AWAITING_APPROVAL: Final = "AwaitingApproval"
CONDITION_ANSWERED: Final = "Answered"
CONDITION_READY: Final = "Ready"
