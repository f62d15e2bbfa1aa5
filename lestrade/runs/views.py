"""Typed views of a run's resource: the raw body from the apiserver parsed once.

Kopf (and the API's shared watch) hand out raw dicts. Code that reads a run — the operator's
supervisor and attempts, the API — builds one view per version of the object and asks it, instead
of re-reading `body["status"]["pendingApprovals"]` in many places with many spellings. A spec
that fails validation does not raise here: `spec_error` says why, and the run fails with it.

`view_of(body)` picks the view by `kind`; both views answer the same questions, so the
operator's pipeline is generic over the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from lestrade.resources.common import FINISHED_PHASES
from lestrade.resources.constants import (
    API_VERSION,
    CONVERSATION_KIND,
    CONVERSATION_PLURAL,
    CONVERSATION_SHORT_NAME,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
    INVESTIGATION_SHORT_NAME,
)
from lestrade.resources.conversation import ConversationSpec
from lestrade.resources.investigation import InvestigationSpec
from lestrade.resources.keys import REQUESTED_BY_ANNOTATION
from lestrade.timefmt import parse_time

__all__ = ["ObjectRef", "RunView", "InvestigationView", "ConversationView", "view_of", "KINDS"]


@dataclass(frozen=True)
class ObjectRef:
    """Who the object is: enough to address it, own objects and post Events about it."""

    kind: str
    plural: str
    short_name: str
    namespace: str
    name: str
    uid: str
    generation: int | None = None
    requester: str | None = None
    """Who created it (`lestrade.dev/requested-by`): whose history its transcript is."""

    @property
    def owner(self) -> dict[str, str]:
        return {"apiVersion": API_VERSION, "kind": self.kind, "name": self.name, "uid": self.uid}

    @property
    def involved(self) -> dict[str, str]:
        return {**self.owner, "namespace": self.namespace}


class RunView:
    """What the operator needs to know about one version of a run's resource."""

    kind: ClassVar[str]
    plural: ClassVar[str]
    short_name: ClassVar[str]
    spec_model: ClassVar[type[BaseModel]]

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        meta = body["metadata"]
        self.ref = ObjectRef(
            self.kind,
            self.plural,
            self.short_name,
            meta["namespace"],
            meta["name"],
            meta["uid"],
            meta.get("generation"),
            (meta.get("annotations") or {}).get(REQUESTED_BY_ANNOTATION),
        )
        self.status: dict[str, Any] = dict(body.get("status") or {})
        self.decisions: dict[str, Any] = dict((body.get("spec") or {}).get("decisions") or {})

    # Parsed on first use: Kopf asks `has_work()` on every watch event of every object, and
    # that needs status only; validating a Conversation's 200 turns there would be wasted.
    @cached_property
    def _parsed(self) -> tuple[Any, str | None]:
        try:
            return self.spec_model.model_validate(self.body.get("spec") or {}), None
        except ValidationError as exc:
            return None, f"invalid spec: {exc}"

    @property
    def spec(self) -> Any:
        """The validated spec, or None when it is invalid (see `spec_error`)."""
        return self._parsed[0]

    @property
    def spec_error(self) -> str | None:
        return self._parsed[1]

    @property
    def resource_version(self) -> int:
        try:
            return int(self.body["metadata"].get("resourceVersion") or 0)
        except ValueError:
            return 0

    @property
    def phase(self) -> str | None:
        return self.status.get("phase")

    @property
    def pending_ids(self) -> list[str]:
        return [p["toolCallId"] for p in self.status.get("pendingApprovals") or []]

    def split_decisions(self) -> tuple[list[str], list[str]]:
        """(decided, undecided) ids of status.pendingApprovals according to spec.decisions."""
        decided = [
            i for i in self.pending_ids if isinstance(self.decisions.get(i), dict) and "approved" in self.decisions[i]
        ]
        return decided, [i for i in self.pending_ids if i not in decided]

    def condition(self, type: str) -> dict[str, Any] | None:  # noqa: A002
        for cond in self.status.get("conditions") or []:
            if cond.get("type") == type:
                return cond
        return None

    def timeout(self, default: float) -> float:
        """spec.timeout in seconds (of the run, or of one Conversation turn), or `default`."""
        seconds = self.spec.timeout_seconds() if self.spec is not None else None
        return seconds or default

    def deadline(self, default_timeout: float) -> float | None:
        """Unix time when the current unit of work times out, or None before it started."""
        started = self.started_at()
        return None if started is None else started.timestamp() + self.timeout(default_timeout)

    # -- answered per kind -----------------------------------------------------------------------

    def has_work(self) -> bool:
        raise NotImplementedError

    def started_at(self) -> datetime | None:
        raise NotImplementedError

    @property
    def unaccepted(self) -> bool:
        """The current unit of work has no status yet (the operator has not seen it)."""
        raise NotImplementedError


class InvestigationView(RunView):
    kind = INVESTIGATION_KIND
    plural = INVESTIGATION_PLURAL
    short_name = INVESTIGATION_SHORT_NAME
    spec_model = InvestigationSpec

    def has_work(self) -> bool:
        return self.phase not in FINISHED_PHASES

    def started_at(self) -> datetime | None:
        return parse_time(self.status.get("startTime"))

    @property
    def unaccepted(self) -> bool:
        return self.phase is None


class ConversationView(RunView):
    kind = CONVERSATION_KIND
    plural = CONVERSATION_PLURAL
    short_name = CONVERSATION_SHORT_NAME
    spec_model = ConversationSpec

    @cached_property
    def asks(self) -> list[str]:
        turns = (self.body.get("spec") or {}).get("turns") or []
        return [str((t or {}).get("ask") or "") for t in turns]

    @cached_property
    def turn_statuses(self) -> list[dict[str, Any]]:
        return list(self.status.get("turns") or [])

    @property
    def current_turn(self) -> int | None:
        """The first turn without a final answer or failure, if any."""
        statuses = self.turn_statuses
        for index in range(len(self.asks)):
            if index >= len(statuses) or statuses[index].get("phase") not in FINISHED_PHASES:
                return index
        return None

    def has_work(self) -> bool:
        return self.current_turn is not None

    def started_at(self) -> datetime | None:
        index = self.current_turn
        statuses = self.turn_statuses
        if index is None or index >= len(statuses):
            return None
        return parse_time(statuses[index].get("startTime"))

    @property
    def unaccepted(self) -> bool:
        index = self.current_turn
        return index is not None and index >= len(self.turn_statuses)


KINDS: dict[str, type[RunView]] = {
    INVESTIGATION_KIND: InvestigationView,
    CONVERSATION_KIND: ConversationView,
}


def view_of(body: Mapping[str, Any]) -> RunView:
    """The typed view of an Investigation or Conversation body."""
    return KINDS[str(body.get("kind") or INVESTIGATION_KIND)](body)
