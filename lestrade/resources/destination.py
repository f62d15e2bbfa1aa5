"""The Destination resource: where the operator sends a run's result (issue 25).

A namespaced delivery target — a generic webhook (a versioned JSON payload signed with
HMAC-SHA256), Slack (an incoming webhook, or a bot token and a channel; Block Kit) or
Microsoft Teams (an incoming webhook; an Adaptive Card). Investigations and Conversations name
destinations in `spec.deliver` with a condition (`Always`, `OnFailure`, `OnFinding`); AlertRoutes
and ScheduledInvestigations name them in the Investigation they create. The operator sends,
never the model, exactly once per run end, and records each send in the run's
`status.deliveries` (`DeliveryRecord`).

Credentials (webhook URLs embed one, bot tokens, signing keys) live in Secrets of the
Destination's namespace that carry the label `lestrade.dev/destination: "true"`: the label is
the Secret owner's consent, so someone who may create a Destination but not read a Secret
cannot make the operator send that Secret anywhere.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field

from lestrade.resources.common import Condition, WireModel, cel_rule
from lestrade.resources.constants import API_VERSION, DESTINATION_KIND
from lestrade.resources.keys import DESTINATION_SECRET_LABEL

__all__ = [
    "DESTINATION_SECRET_LABEL",
    "DeliveryCondition",
    "DeliverTo",
    "DeliveryState",
    "DeliveryRecord",
    "SecretKeyRef",
    "WebhookTarget",
    "SlackTarget",
    "TeamsTarget",
    "RetryPolicy",
    "DestinationSpec",
    "DestinationStatus",
    "Destination",
    "DELIVERY_PENDING",
    "DELIVERY_DONE",
]

"""A Secret is read for a Destination only when it carries this label with the value "true"."""

DELIVERY_PENDING = "Pending"
DELIVERY_DONE = "Done"
"""Values of a run's `status.delivery` (a selectable field: the operator's delivery watch asks
the apiserver only for runs whose deliveries are not done)."""

_URL = r"^https?://[^\s]+$"


class SecretKeyRef(WireModel):
    """One key of a Secret in the Destination's namespace (labelled lestrade.dev/destination=true)."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(min_length=1, max_length=253, description="Key in the Secret's data.")


class WebhookTarget(WireModel):
    """A generic HTTPS endpoint: POST of the versioned JSON payload (docs/schemas/delivery-v1.json)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "has(self.url) != has(self.urlSecretRef)",
                    "webhook: give exactly one of url and urlSecretRef",
                )
            ]
        }
    )

    url: str | None = Field(default=None, max_length=2048, pattern=_URL, description="The URL to POST to.")
    url_secret_ref: SecretKeyRef | None = Field(
        default=None, description="The URL, from a Secret (when the URL itself is a credential)."
    )
    signing_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="HMAC-SHA256 key: every request carries X-Lestrade-Signature: "
        "v1=<hex HMAC of '<X-Lestrade-Timestamp>.<body>'>. Unsigned when omitted.",
    )


class SlackTarget(WireModel):
    """Slack: an incoming webhook, or a bot token and a channel (chat.postMessage)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "has(self.webhookUrlSecretRef) != has(self.tokenSecretRef)",
                    "slack: give exactly one of webhookUrlSecretRef and tokenSecretRef",
                ),
                cel_rule(
                    "!has(self.tokenSecretRef) || has(self.channel)",
                    "slack: tokenSecretRef needs a channel",
                ),
            ]
        }
    )

    webhook_url_secret_ref: SecretKeyRef | None = Field(
        default=None, description="The incoming webhook's URL (https://hooks.slack.com/...), from a Secret."
    )
    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="A bot token (xoxb-...), from a Secret; with channel."
    )
    channel: str | None = Field(default=None, max_length=256, description="Channel id or name for the bot token.")
    api_url: str = Field(
        default="https://slack.com/api",
        max_length=2048,
        pattern=_URL,
        description="Slack's Web API base URL (for the bot token).",
    )


class TeamsTarget(WireModel):
    """Microsoft Teams: an incoming webhook (or a Workflows webhook) taking an Adaptive Card."""

    webhook_url_secret_ref: SecretKeyRef = Field(description="The webhook's URL, from a Secret.")


class RetryPolicy(WireModel):
    """How a failed send is tried again (a destination that is down never blocks the run)."""

    max_attempts: int = Field(default=5, ge=1, le=20, description="Attempts in all, first included.")
    backoff_seconds: float = Field(
        default=2.0,
        ge=0.05,
        le=3600,
        description="Wait before the second attempt; doubled for each further one (at most 10 minutes).",
    )


class DestinationSpec(WireModel):
    """Where to send and how."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule("self.type != 'Webhook' || has(self.webhook)", "type Webhook needs spec.webhook"),
                cel_rule("self.type != 'Slack' || has(self.slack)", "type Slack needs spec.slack"),
                cel_rule("self.type != 'Teams' || has(self.teams)", "type Teams needs spec.teams"),
            ]
        }
    )

    type: Literal["Webhook", "Slack", "Teams"] = Field(
        description="Webhook (versioned JSON, HMAC-signed), Slack (Block Kit) or Teams (Adaptive Card)."
    )
    webhook: WebhookTarget | None = Field(default=None, description="For type Webhook.")
    slack: SlackTarget | None = Field(default=None, description="For type Slack.")
    teams: TeamsTarget | None = Field(default=None, description="For type Teams.")
    console_url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=_URL,
        description="Base URL of Lestrade's web console; messages link to the run's page there. "
        "The operator's LESTRADE_CONSOLE_URL when omitted.",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="Retries with backoff.")


class DestinationStatus(WireModel):
    """The latest send. Written only by the operator."""

    last_delivery_time: datetime | None = Field(default=None, description="When the latest send ended.")
    last_run: str | None = Field(default=None, description="The run (kind/name) sent last.")
    last_state: str | None = Field(default=None, description="Sent or Failed.")
    last_error: str | None = Field(default=None, max_length=4096, description="The latest send's error.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions (none yet).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class Destination(WireModel):
    api_version: Literal["lestrade.dev/v1alpha1"] = Field(default=API_VERSION)
    kind: Literal["Destination"] = Field(default=DESTINATION_KIND)
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: DestinationSpec
    status: DestinationStatus = Field(default_factory=DestinationStatus)


# -- what runs say about their destinations ------------------------------------------------------


class DeliveryCondition(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    ON_FINDING = "OnFinding"


class DeliverTo(WireModel):
    """One destination of a run's result."""

    destination: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Name of a Destination in the run's namespace.",
    )
    when: DeliveryCondition = Field(
        default=DeliveryCondition.ALWAYS,
        description="Always (every run end, and every pause for approval); OnFailure (the run "
        "failed); OnFinding (the run failed, or its answer reports a finding: a check that "
        "found nothing sends nothing).",
    )


class DeliveryState(StrEnum):
    SENDING = "Sending"
    RETRYING = "Retrying"
    SENT = "Sent"
    FAILED = "Failed"


class DeliveryRecord(WireModel):
    """One message to one destination (the idempotency record: written before each attempt)."""

    id: str = Field(
        max_length=512,
        description="Idempotency key: <uid>/<event>/<destination>; sent as X-Lestrade-Delivery "
        "and the payload's id (a receiver that saw it already can ignore a repeat).",
    )
    destination: str = Field(max_length=253, description="The Destination's name.")
    event: str = Field(
        max_length=128,
        description="What is told: end (the run ended), turn-<i> (a "
        "Conversation's turn ended) or approval-<digest> (calls wait for approval).",
    )
    state: DeliveryState = Field(
        description="Sending (an attempt is under way), Retrying (waiting to try again), "
        "Sent, or Failed (attempts used up, or refused for good).",
    )
    attempts: int = Field(default=0, ge=0, description="Attempts started so far.")
    last_error: str | None = Field(default=None, max_length=1024, description="The latest attempt's error.")
    last_attempt_time: datetime | None = Field(default=None, description="When the latest attempt started.")
    next_attempt_time: datetime | None = Field(default=None, description="When Retrying tries again.")
    sent_time: datetime | None = Field(default=None, description="When it was Sent.")
    ref: str | None = Field(
        default=None,
        max_length=256,
        description="The receiver's handle of the message (Slack: the message's ts), for updates.",
    )
