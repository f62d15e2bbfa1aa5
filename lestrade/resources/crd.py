"""The CustomResourceDefinitions, built from the pydantic models.

The models are the single source of truth: field names, types, bounds, defaults, descriptions
and the CEL rules attached to them all come from `investigation.py` and `conversation.py`.
This module adds only what is about the resource as a whole: names, the status subresource,
printer columns, and the root-level rule that needs to see spec and status together.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from lestrade.resources.alertroute import AlertRouteSpec, AlertRouteStatus, route_name_rule
from lestrade.resources.constants import (
    ALERTROUTE_KIND,
    ALERTROUTE_PLURAL,
    ALERTROUTE_SHORT_NAME,
    ALERTROUTE_SINGULAR,
    CATEGORY,
    CONVERSATION_KIND,
    CONVERSATION_PLURAL,
    CONVERSATION_SHORT_NAME,
    CONVERSATION_SINGULAR,
    DESTINATION_KIND,
    DESTINATION_PLURAL,
    DESTINATION_SHORT_NAME,
    DESTINATION_SINGULAR,
    GROUP,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
    INVESTIGATION_SHORT_NAME,
    INVESTIGATION_SINGULAR,
    MCPSERVER_KIND,
    MCPSERVER_PLURAL,
    MCPSERVER_SHORT_NAME,
    MCPSERVER_SINGULAR,
    SCHEDULED_KIND,
    SCHEDULED_PLURAL,
    SCHEDULED_SHORT_NAME,
    SCHEDULED_SINGULAR,
    VERSION,
)
from lestrade.resources.conversation import ConversationSpec, ConversationStatus
from lestrade.resources.destination import DestinationSpec, DestinationStatus
from lestrade.resources.investigation import (
    SELECTABLE_FIELDS,
    InvestigationSpec,
    InvestigationStatus,
    finished_is_final_rule,
    immutability_rule,
)
from lestrade.resources.mcpserver import MCPServerSpec, MCPServerStatus, server_name_rule
from lestrade.resources.scheduled import ScheduledInvestigationSpec, ScheduledInvestigationStatus, schedule_name_rule
from lestrade.resources.schema import structural_schema

__all__ = ["CrdDefinition", "DEFINITIONS", "crd_manifest", "crd_manifests", "crd_name"]


def _column(name: str, json_path: str, type_: str, description: str, priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {
        "name": name,
        "type": type_,
        "jsonPath": json_path,
        "description": description,
    }
    if priority:
        column["priority"] = priority
    return column


@dataclass(frozen=True)
class CrdDefinition:
    """Everything about one resource that the models do not say themselves."""

    kind: str
    plural: str
    singular: str
    short_name: str
    description: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel]
    columns: list[dict[str, Any]]
    root_rules: list[dict[str, Any]] = field(default_factory=list)
    file_name: str = ""
    selectable_fields: tuple[str, ...] = ()  # JSONPaths for field selectors (list/watch)

    @property
    def name(self) -> str:
        """metadata.name of the CRD."""
        return f"{self.plural}.{GROUP}"


_AGE = _column("Age", ".metadata.creationTimestamp", "date", "Time since the resource was created.")

INVESTIGATION = CrdDefinition(
    kind=INVESTIGATION_KIND,
    plural=INVESTIGATION_PLURAL,
    singular=INVESTIGATION_SINGULAR,
    short_name=INVESTIGATION_SHORT_NAME,
    description=(
        "An Investigation asks Lestrade's agent to troubleshoot a problem: it reads the "
        "cluster (and other tools) step by step and writes an analysis into status. Tool "
        "calls that need approval pause it until spec.decisions answers them. The spec is "
        "immutable once the run has started, except spec.decisions."
    ),
    spec_model=InvestigationSpec,
    status_model=InvestigationStatus,
    columns=[
        _column("Phase", ".status.phase", "string", "Where the run is."),
        _column("Steps", ".status.steps", "integer", "Model calls made so far."),
        _column("Tools", ".status.toolCallCount", "integer", "Tool calls made so far."),
        _column("Tokens", ".status.usage.totalTokens", "integer", "Tokens spent so far."),
        _column(
            "Grounded",
            ".status.groundedFindings",
            "string",
            "Findings that cite the tool calls they rest on, of all findings.",
            priority=1,
        ),
        _column("Model", ".status.model", "string", "The model used.", priority=1),
        _column("Title", ".spec.title", "string", "The problem investigated.", priority=1),
        _column(
            "Requester", ".status.requester.username", "string", "Who created it (recorded at admission).", priority=1
        ),
        _column("Message", ".status.message", "string", "Current state or error.", priority=1),
        _AGE,
    ],
    root_rules=[immutability_rule(), finished_is_final_rule()],
    file_name="investigation.yaml",
    selectable_fields=SELECTABLE_FIELDS,
)

CONVERSATION = CrdDefinition(
    kind=CONVERSATION_KIND,
    plural=CONVERSATION_PLURAL,
    singular=CONVERSATION_SINGULAR,
    short_name=CONVERSATION_SHORT_NAME,
    description=(
        "A Conversation is a multi-turn chat with Lestrade's agent. Ask by appending "
        "{ask: ...} to spec.turns (append-only); the answers appear in status.turns, index "
        "for index. Tool calls that need approval pause it until spec.decisions answers them."
    ),
    spec_model=ConversationSpec,
    status_model=ConversationStatus,
    columns=[
        _column("Phase", ".status.phase", "string", "State of the latest turn."),
        _column("Asked", ".status.askedTurns", "integer", "Turns asked so far."),
        _column("Answered", ".status.answeredTurns", "integer", "Turns answered so far."),
        _column("Version", ".status.version", "integer", "Conversation version."),
        _column("Tokens", ".status.usage.totalTokens", "integer", "Tokens spent so far."),
        _column("Model", ".status.model", "string", "The model used.", priority=1),
        _column(
            "Requester", ".status.requester.username", "string", "Who created it (recorded at admission).", priority=1
        ),
        _column(
            "Source",
            ".metadata.annotations.lestrade\\.dev/request-source",
            "string",
            "Where an HTTP client said the chat comes from (request_source).",
            priority=1,
        ),
        _column(
            "User",
            ".metadata.annotations.lestrade\\.dev/user-id",
            "string",
            "The user an HTTP client named (user_id; not verified).",
            priority=1,
        ),
        _column("Message", ".status.message", "string", "Current state or error.", priority=1),
        _AGE,
    ],
    file_name="conversation.yaml",
    selectable_fields=(".status.delivery",),
)

ALERTROUTE = CrdDefinition(
    kind=ALERTROUTE_KIND,
    plural=ALERTROUTE_PLURAL,
    singular=ALERTROUTE_SINGULAR,
    short_name=ALERTROUTE_SHORT_NAME,
    description=(
        "An AlertRoute starts Investigations from alerts: every firing alert that Alertmanager "
        "sends to Lestrade (POST /api/alertmanager) and that matches spec.matchers creates one "
        "Investigation from spec.investigation per alert and dedup window, within "
        "spec.limits. status counts what was matched, created, deduplicated and dropped."
    ),
    spec_model=AlertRouteSpec,
    status_model=AlertRouteStatus,
    columns=[
        _column(
            "Ready",
            '.status.conditions[?(@.type=="Ready")].status',
            "string",
            "Whether the route can match alerts (False: see Reason and the condition's message).",
        ),
        _column(
            "Reason",
            '.status.conditions[?(@.type=="Ready")].reason',
            "string",
            "Why the route is (not) ready, e.g. AnyNamespaceNotAllowed.",
        ),
        _column("Matched", ".status.matched", "integer", "Firing alerts that matched."),
        _column("Created", ".status.created", "integer", "Investigations created."),
        _column("Deduplicated", ".status.deduplicated", "integer", "Alerts already investigated."),
        _column("Dropped", ".status.dropped", "integer", "Alerts dropped by a limit."),
        _column("Last", ".status.lastInvestigation.name", "string", "Latest Investigation.", priority=1),
        _column(
            "Message",
            '.status.conditions[?(@.type=="Ready")].message',
            "string",
            "The Ready condition's message.",
            priority=1,
        ),
        _AGE,
    ],
    root_rules=[route_name_rule()],
    file_name="alertroute.yaml",
)

SCHEDULED = CrdDefinition(
    kind=SCHEDULED_KIND,
    plural=SCHEDULED_PLURAL,
    singular=SCHEDULED_SINGULAR,
    short_name=SCHEDULED_SHORT_NAME,
    description=(
        "A ScheduledInvestigation creates an Investigation from spec.investigation at every "
        "time of spec.schedule (cron, like a CronJob), following spec.concurrencyPolicy and "
        "keeping spec.successfulHistoryLimit / failedHistoryLimit of them."
    ),
    spec_model=ScheduledInvestigationSpec,
    status_model=ScheduledInvestigationStatus,
    columns=[
        _column("Schedule", ".spec.schedule", "string", "Cron schedule."),
        _column("Timezone", ".spec.timeZone", "string", "Time zone of the schedule.", priority=1),
        _column("Suspend", ".spec.suspend", "boolean", "Whether new runs are suspended."),
        _column("Last", ".status.lastScheduleTime", "date", "Latest scheduled time handled."),
        _column("Run", ".status.lastInvestigation", "string", "The Investigation created last."),
        _column("Next", ".status.nextScheduleTime", "date", "Next scheduled time.", priority=1),
        _AGE,
    ],
    root_rules=[schedule_name_rule()],
    file_name="scheduledinvestigation.yaml",
)

MCPSERVER = CrdDefinition(
    kind=MCPSERVER_KIND,
    plural=MCPSERVER_PLURAL,
    singular=MCPSERVER_SINGULAR,
    short_name=MCPSERVER_SHORT_NAME,
    description=(
        "An MCPServer is a remote MCP tool server (streamable HTTP or SSE) whose tools the "
        "runs of its namespace use, seen by the model as <name>__<tool>. The operator connects, "
        "lists the tools into status and keeps the Ready condition; the cluster admin may share "
        "a server with other namespaces (mcpServers in the scope policy)."
    ),
    spec_model=MCPServerSpec,
    status_model=MCPServerStatus,
    columns=[
        _column("URL", ".spec.url", "string", "The server's endpoint."),
        _column("Ready", ".status.conditions[?(@.type=='Ready')].status", "string", "Connected, tools listed."),
        _column("Tools", ".status.toolCount", "integer", "Tools offered to runs."),
        _column("Reason", ".status.conditions[?(@.type=='Ready')].reason", "string", "Why (not) ready."),
        _column("Transport", ".spec.transport", "string", "StreamableHTTP or SSE.", priority=1),
        _column("Error", ".status.lastError", "string", "The latest failure.", priority=1),
        _AGE,
    ],
    root_rules=[server_name_rule()],
    file_name="mcpserver.yaml",
)

DESTINATION = CrdDefinition(
    kind=DESTINATION_KIND,
    plural=DESTINATION_PLURAL,
    singular=DESTINATION_SINGULAR,
    short_name=DESTINATION_SHORT_NAME,
    description=(
        "A Destination is where the operator sends a run's result: a generic webhook (a "
        "versioned JSON payload signed with HMAC-SHA256), Slack (Block Kit) or Microsoft Teams "
        "(an Adaptive Card). Investigations and Conversations name destinations in "
        "spec.deliver; each send is recorded in the run's status.deliveries."
    ),
    spec_model=DestinationSpec,
    status_model=DestinationStatus,
    columns=[
        _column("Type", ".spec.type", "string", "Webhook, Slack or Teams."),
        _column("Last", ".status.lastState", "string", "Sent or Failed: the latest send."),
        _column("Run", ".status.lastRun", "string", "The run sent last.", priority=1),
        _column("Sent", ".status.lastDeliveryTime", "date", "When the latest send ended."),
        _column("Error", ".status.lastError", "string", "The latest send's error.", priority=1),
        _AGE,
    ],
    file_name="destination.yaml",
)

DEFINITIONS: tuple[CrdDefinition, ...] = (
    INVESTIGATION,
    CONVERSATION,
    ALERTROUTE,
    SCHEDULED,
    MCPSERVER,
    DESTINATION,
)


def crd_name(plural: str) -> str:
    """metadata.name of the CRD for a plural, e.g. investigations.lestrade.dev."""
    return f"{plural}.{GROUP}"


def _root_schema(definition: CrdDefinition) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "description": definition.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation "
                "of an object: lestrade.dev/v1alpha1.",
            },
            "kind": {
                "type": "string",
                "description": f"Kind is the type of this object: {definition.kind}.",
            },
            # The apiserver owns metadata's schema and refuses anything but a bare type here.
            "metadata": {"type": "object"},
            "spec": structural_schema(definition.spec_model),
            "status": structural_schema(definition.status_model),
        },
    }
    if definition.root_rules:
        schema["x-kubernetes-validations"] = copy.deepcopy(definition.root_rules)
    return schema


def crd_manifest(definition: CrdDefinition) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition for one resource."""
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": copy.deepcopy(definition.columns),
        "schema": {"openAPIV3Schema": _root_schema(definition)},
    }
    if definition.selectable_fields:
        version["selectableFields"] = [{"jsonPath": path} for path in definition.selectable_fields]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": definition.name,
            "labels": {"app.kubernetes.io/part-of": "lestrade"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": definition.kind,
                "listKind": f"{definition.kind}List",
                "plural": definition.plural,
                "singular": definition.singular,
                "shortNames": [definition.short_name],
                "categories": [CATEGORY],
            },
            "versions": [version],
        },
    }


def crd_manifests() -> list[dict[str, Any]]:
    """All Lestrade CRDs, Investigation first."""
    return [crd_manifest(d) for d in DEFINITIONS]
