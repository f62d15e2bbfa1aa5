"""The ScheduledInvestigation resource: an Investigation on a cron schedule, like a CronJob.

E.g. a daily "is the cluster healthy?" whose sections give a structured result. The operator
(`lestrade.operator.triggers.schedules`) creates one Investigation per scheduled time, named after the
schedule and the time (so a restart or a second operator never creates it twice), follows the
concurrency policy, and keeps the configured history. After a restart, missed times are handled
as a CronJob handles them: only the most recent one is started, and only within
`startingDeadlineSeconds` of it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from lestrade.resources.common import Condition, WireModel, cel_rule
from lestrade.resources.constants import API_VERSION, SCHEDULED_KIND
from lestrade.resources.investigation import InvestigationSpec

__all__ = [
    "ScheduledInvestigationSpec",
    "ScheduledInvestigationStatus",
    "ScheduledInvestigation",
    "SCHEDULE_PATTERN",
    "MAX_SCHEDULE_NAME",
    "schedule_name_rule",
]

SCHEDULE_PATTERN = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    r"[0-9A-Za-z*/,?LW#-]+( +[0-9A-Za-z*/,?LW#-]+){4,5})$"
)
"""Five cron fields (minute hour day-of-month month day-of-week) or a macro; a sixth field
gives seconds (croniter's extension, handy for tests)."""

MAX_SCHEDULE_NAME = 52
"""Like a CronJob's: the Investigations are named `<name>-<unix time>` (at most 63 characters)."""


class ScheduledInvestigationSpec(WireModel):
    """When to investigate, and what."""

    schedule: str = Field(
        min_length=1,
        max_length=256,
        pattern=SCHEDULE_PATTERN,
        description="Cron schedule, e.g. '0 8 * * *' (every day at 8:00) or '@hourly'; a sixth field gives seconds.",
    )
    time_zone: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$",
        description="IANA time zone of the schedule, e.g. Europe/Berlin; UTC when omitted.",
    )
    suspend: bool = Field(default=False, description="true: no new Investigations until set back to false.")
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = Field(
        default="Allow",
        description="Allow: runs may overlap; Forbid: skip a time while the previous run is "
        "unfinished; Replace: delete the unfinished run and start the new one.",
    )
    starting_deadline_seconds: int | None = Field(
        default=None,
        ge=0,
        description="A time missed by more than this many seconds (operator down, say) is "
        "skipped; no deadline when omitted.",
    )
    successful_history_limit: int = Field(default=3, ge=0, le=1000, description="Succeeded Investigations kept.")
    failed_history_limit: int = Field(default=1, ge=0, le=1000, description="Failed Investigations kept.")
    investigation: InvestigationSpec = Field(
        description="The Investigation to create at each scheduled time (its sections are the "
        "structured result, e.g. {Healthy: yes or no, Findings: ...})."
    )


class ScheduledInvestigationStatus(WireModel):
    """What the schedule did. Written only by the operator."""

    last_schedule_time: datetime | None = Field(
        default=None, description="The latest scheduled time handled (started or skipped)."
    )
    next_schedule_time: datetime | None = Field(default=None, description="The next scheduled time.")
    last_successful_time: datetime | None = Field(
        default=None, description="When the latest Investigation that succeeded completed."
    )
    last_investigation: str | None = Field(default=None, description="The Investigation created last.")
    active: list[str] = Field(
        default_factory=list, max_length=1000, description="Unfinished Investigations of this schedule."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready: the schedule and time zone are usable (False names the problem).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this status reflects."
    )


class ScheduledInvestigation(WireModel):
    api_version: Literal["lestrade.dev/v1alpha1"] = Field(default=API_VERSION)
    kind: Literal["ScheduledInvestigation"] = Field(default=SCHEDULED_KIND)
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ScheduledInvestigationSpec
    status: ScheduledInvestigationStatus = Field(default_factory=ScheduledInvestigationStatus)


def schedule_name_rule() -> dict[str, Any]:
    return cel_rule(
        f"self.metadata.name.size() <= {MAX_SCHEDULE_NAME}",
        f"metadata.name: at most {MAX_SCHEDULE_NAME} characters (its Investigations are named <name>-<unix time>)",
    )
