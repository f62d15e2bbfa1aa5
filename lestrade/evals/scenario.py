"""An evaluation scenario: a folder that holds a broken cluster state and what finding it takes.

    eval/scenarios/<name>/
      scenario.yaml   the ask, the root cause, the evidence facts, the reference plan, and the
                      simulated data: logs, Events, metric series, extra objects
      cluster.yaml    the manifests (any kinds), applied into the scenario's own namespace

`${namespace}` anywhere in either file is the scenario's namespace (`eval-<digest of the name>`). A scenario
needing a data source the suite does not serve yet (an MCP server, a "what changed" tool)
names its tools in the plan like any other: until the tool exists the run reports the facts it
would have given as lost to "no tool", so such a folder can be written before its tool.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Evidence",
    "PlannedCall",
    "LogSpec",
    "EventSpec",
    "MetricSpec",
    "Scenario",
    "load_scenario",
    "load_scenarios",
    "namespace_for",
]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a hand-written scenario must fail loudly


class Evidence(_Strict):
    """One fact a correct investigation must have seen: a literal `text` or a `regex`."""

    text: str | None = None
    regex: str | None = None
    what: str = Field(default="", description="what the fact shows, for the report")

    @model_validator(mode="after")
    def _one(self) -> Evidence:
        if (self.text is None) == (self.regex is None):
            raise ValueError("an evidence fact has exactly one of text or regex")
        if self.regex is not None:
            re.compile(self.regex)
        return self

    @property
    def label(self) -> str:
        return self.text if self.text is not None else f"/{self.regex}/"

    def found_in(self, text: str) -> bool:
        if self.text is not None:
            return self.text in text
        return re.search(self.regex or "", text, re.MULTILINE) is not None


class PlannedCall(_Strict):
    """A tool call of the reference plan; `id` is what the answer cites (default `ev-<n>`)."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class GeneratedLines(_Strict):
    """Filler lines around key lines: noise a real service writes (`{n}` is the line number)."""

    lines: int = Field(ge=1, le=100_000)
    filler: list[str] = Field(min_length=1, description="templates cycled through; {n} = line number")
    insert: dict[int, str] = Field(default_factory=dict, description="line number (1-based) -> key line")


class LogSpec(_Strict):
    """Logs a pod serves through the real logs API (KWOK `Logs` objects; any size): the pod
    named `pod`, or every pod matching the label `selector` (pods of a Deployment)."""

    pod: str | None = None
    selector: str | None = None
    container: str | None = None
    current: str | GeneratedLines = ""
    previous: str | GeneratedLines | None = None

    @model_validator(mode="after")
    def _target(self) -> LogSpec:
        if (self.pod is None) == (self.selector is None):
            raise ValueError("logs name exactly one of pod or selector")
        return self


class EventSpec(_Strict):
    """A Kubernetes Event on an object of the scenario (`object: kind/name`); `repeat` > 1
    creates that many Events (noise), `{n}` in the message is the copy's number."""

    object: str
    reason: str
    message: str
    type: Literal["Normal", "Warning"] = "Warning"
    count: int = Field(default=1, ge=1)
    component: str = "kubelet"
    repeat: int = Field(default=1, ge=1, le=5000)
    age_minutes: float = Field(default=2, ge=0, description="how long ago it was last seen")

    @field_validator("object")
    @classmethod
    def _kind_name(cls, value: str) -> str:
        if value.count("/") != 1:
            raise ValueError("object is kind/name, e.g. pod/web-0")
        return value


class MetricSpec(_Strict):
    """A series the test Prometheus scrapes: `series` in exposition syntax and its value; with
    `per_scrape` it is a counter that grows by that much every scrape (one per second)."""

    series: str
    value: float
    per_scrape: float | None = None
    help: str = ""


class Scenario(_Strict):
    name: str
    folder: Path = Field(exclude=True)
    title: str = Field(description="what an alert or a person reports (the Investigation's title)")
    description: str = ""
    question: str | None = None
    subject: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    category: str = Field(description="the issue's coverage list: oom, config-ref, image-pull, ...")
    root_cause: str = Field(description="the root cause in one sentence")
    evidence: list[Evidence] = Field(min_length=1)
    plan: list[list[PlannedCall]] = Field(min_length=1, description="model turns; calls of a turn run together")
    conclusion: str = Field(default="", description="the scripted answer's conclusion (cites the plan's ids)")
    logs: list[LogSpec] = Field(default_factory=list)
    events: list[EventSpec] = Field(default_factory=list)
    metrics: list[MetricSpec] = Field(default_factory=list)
    cluster_objects: list[dict[str, Any]] = Field(
        default_factory=list, description="cluster-scoped objects (nodes, storage classes); removed afterwards"
    )
    namespace_labels: dict[str, str] = Field(default_factory=dict, description="labels of the scenario's namespace")
    tolerate_kwok: bool = Field(default=True, description="add the toleration simulated nodes need to every pod")
    ready_timeout: float = Field(default=90, description="seconds to wait until the plan's raw outputs hold the facts")
    manifests: list[dict[str, Any]] = Field(default_factory=list, exclude=True)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("a scenario name is lower-case letters, digits and dashes, at most 42 characters")
        return value

    @model_validator(mode="after")
    def _ids(self) -> Scenario:
        n = 0
        seen: set[str] = set()
        for turn in self.plan:
            for call in turn:
                n += 1
                call.id = call.id or f"ev-{n}"
                if call.id in seen:
                    raise ValueError(f"plan call id {call.id} is used twice")
                seen.add(call.id)
        return self

    @property
    def namespace(self) -> str:
        return namespace_for(self.name)

    def calls(self) -> list[PlannedCall]:
        return [call for turn in self.plan for call in turn]


def namespace_for(name: str) -> str:
    """`eval-<digest>`: stable per scenario, and without the scenario's name, which often says
    the root cause (a model in model mode reads namespace names)."""
    return "eval-" + hashlib.sha256(name.encode()).hexdigest()[:8]


def _substitute(text: str, namespace: str) -> str:
    return text.replace("${namespace}", namespace)


def load_scenario(folder: Path) -> Scenario:
    """A scenario from its folder; errors name the file."""
    folder = Path(folder)
    name = folder.name
    namespace = namespace_for(name)
    spec_file = folder / "scenario.yaml"
    try:
        raw = yaml.safe_load(_substitute(spec_file.read_text(), namespace)) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{spec_file}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{spec_file}: expected a mapping")
    manifests: list[dict[str, Any]] = []
    cluster_file = folder / "cluster.yaml"
    if cluster_file.exists():
        try:
            manifests = [d for d in yaml.safe_load_all(_substitute(cluster_file.read_text(), namespace)) if d]
        except yaml.YAMLError as exc:
            raise ValueError(f"{cluster_file}: {exc}") from exc
    try:
        return Scenario(name=name, folder=folder, manifests=manifests, **raw)
    except ValueError as exc:
        raise ValueError(f"{spec_file}: {exc}") from exc


def load_scenarios(root: Path, only: list[str] | None = None) -> list[Scenario]:
    """Every scenario folder under `root` (sorted), or only those named."""
    folders = sorted(p for p in Path(root).iterdir() if (p / "scenario.yaml").exists())
    if only:
        missing = set(only) - {f.name for f in folders}
        if missing:
            raise ValueError(f"no such scenario(s) under {root}: {', '.join(sorted(missing))}")
        folders = [f for f in folders if f.name in only]
    return [load_scenario(f) for f in folders]
