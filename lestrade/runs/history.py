"""Past findings (a run's history): what finished Investigations and Conversations concluded,
searchable. (`findings.py` is another thing: the grounded findings of one answer.)

One index serves every reader — the API (`GET /api/findings`, the MCP tool `search_findings`,
fed from its shared watches), the kubectl plugin (`kubectl lestrade history`, fed from a list
made as the kubeconfig's user) and the agent's own `search_findings` tool (fed from a list made
as the run's scope identity) — so each asks the same questions of the same facts:

- `finding_of(obj)`: the facts of one finished run (None while it runs): its involved
  resources (the subject and every resource a tool call named), the alert name, when it
  finished, its root cause (the root-cause section, else the head of the answer) and the fix
  that was applied or approved (the write calls a person approved, with their outcome);
- `FindingsIndex`: an in-memory SQLite database with an FTS5 full-text index (porter stemming,
  BM25 ranking; SQLite ships with CPython, so nothing to install; contentless: the text is not
  kept twice) over title, alert, involved resources and text, and plain tables for the exact
  filters (involved resource, alert name,
  time range, the namespaces the caller may read).

Everything in a finding was written by a model or read from the cluster: hostile text. Free-text
queries are reduced to quoted terms, so a query can never use FTS5's own syntax.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lestrade.resources.common import FINISHED_PHASES
from lestrade.resources.constants import CONVERSATION_KIND, INVESTIGATION_KIND
from lestrade.timefmt import parse_time

__all__ = ["Finding", "FindingsIndex", "SearchQuery", "finding_of", "parse_since", "MAX_RESULTS"]

MAX_RESULTS = 50
ROOT_CAUSE_CHARS = 1500
FIX_CHARS = 1000
BODY_CHARS = 6000
"""Characters of a run's text that are indexed (the start of the answer says what it found)."""
MAX_TERMS = 24
_ROOT_CAUSE = re.compile(r"root cause|conclusion|cause", re.I)
_FIX = re.compile(r"next step|remediation|fix|resolution", re.I)
_TERM = re.compile(r"\w+", re.UNICODE)
_RESOURCE_KEYS = (
    "pod",
    "deployment",
    "statefulset",
    "daemonset",
    "job_name",
    "node",
    "service",
    "persistentvolumeclaim",
    "replicaset",
    "cronjob",
)


@dataclass(frozen=True)
class Finding:
    kind: str
    namespace: str
    name: str
    version: str
    created: float
    finished: float
    phase: str
    title: str
    alert: str
    resources: tuple[tuple[str, str, str], ...]
    """(namespace, kind, name) of every resource the run was about or looked at."""
    root_cause: str
    fix: str
    body: str = field(repr=False)

    def result(self, now: float | None = None) -> dict[str, Any]:
        """What a reader gets: the run, its age, root cause and fix (not the indexed text)."""
        age = max(0.0, (now or time.time()) - self.finished)
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "phase": self.phase,
            "title": self.title,
            "alert": self.alert or None,
            "finished": _iso(self.finished),
            "age": _age(age),
            "ageSeconds": int(age),
            "rootCause": self.root_cause,
            "fix": self.fix or None,
            "resources": [{"namespace": ns, "kind": k, "name": n} for ns, k, n in self.resources[:20]],
        }


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _epoch(value: Any) -> float | None:
    try:
        moment = parse_time(str(value)) if value else None
    except ValueError:
        return None
    return moment.timestamp() if moment else None


def parse_since(value: str | None, now: float | None = None) -> float | None:
    """`24h`, `7d`, `30m`, `90s` ago, or an RFC 3339 time; None for nothing. ValueError names
    what is accepted."""
    if not value:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", value)
    if match:
        seconds = int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return (now or time.time()) - seconds
    epoch = _epoch(value)
    if epoch is None:
        raise ValueError(f"{value!r} is neither a duration like 24h or 7d nor an RFC 3339 time")
    return epoch


def _text(value: Any, limit: int) -> str:
    text = str(value or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _involved(obj: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    spec = obj.get("spec") or {}
    found: list[tuple[str, str, str]] = []
    subject = spec.get("subject") or {}
    if isinstance(subject, Mapping):
        ns = str(subject.get("namespace") or namespace)
        if subject.get("name") and str(subject.get("kind") or "").lower() != "alert":
            found.append((ns, str(subject.get("kind") or ""), str(subject["name"])))
        for key in _RESOURCE_KEYS:  # an alert's labels name the workload
            if subject.get(key):
                found.append((ns, "Job" if key == "job_name" else key.capitalize(), str(subject[key])))
    for call in (obj.get("status") or {}).get("toolCalls") or []:
        params = call.get("params") or {}
        name = params.get("name") or params.get("pod_name")
        if isinstance(name, str) and name:
            kind = str(params.get("kind") or ("Pod" if params.get("pod_name") else ""))
            found.append((str(params.get("namespace") or namespace), kind, name))
    seen: dict[tuple[str, str, str], None] = {}
    for ns, kind, name in found:
        seen.setdefault((ns[:63], kind[:63].lower(), name[:253]), None)
    return tuple(seen)


def _alert(obj: Mapping[str, Any]) -> str:
    spec = obj.get("spec") or {}
    subject = spec.get("subject") or {}
    if isinstance(subject, Mapping) and str(subject.get("kind") or "").lower() == "alert" and subject.get("name"):
        return str(subject["name"])[:253]
    alert = ((spec.get("context") or {}).get("alert") or {}) if isinstance(spec.get("context"), Mapping) else {}
    labels = alert.get("labels") if isinstance(alert, Mapping) else None
    if isinstance(labels, Mapping) and labels.get("alertname"):
        return str(labels["alertname"])[:253]
    return ""


def _fix(obj: Mapping[str, Any], sections: Mapping[str, Any]) -> str:
    """The calls a person approved (applied: their outcome says whether it worked), else the
    run's own suggestion."""
    decisions = (obj.get("spec") or {}).get("decisions") or {}
    applied = [
        f"{call.get('description') or call.get('name')} ({'approved, ' if call.get('status') != 'success' else ''}"
        f"{call.get('status')})"
        for call in (obj.get("status") or {}).get("toolCalls") or []
        if (decisions.get(call.get("id")) or {}).get("approved")
    ]
    if applied:
        return _text("; ".join(applied), FIX_CHARS)
    suggested = next((v for k, v in sections.items() if _FIX.search(k) and v), "")
    return _text(f"suggested: {suggested}", FIX_CHARS) if suggested else ""


def finding_of(obj: Mapping[str, Any]) -> Finding | None:
    """The finding of a finished run with an answer; None for a run that is not finished (or
    a Conversation none of whose turns was answered)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    kind = str(obj.get("kind") or INVESTIGATION_KIND)
    created = _epoch(meta.get("creationTimestamp")) or 0.0
    if kind == CONVERSATION_KIND:
        turns = [t for t in status.get("turns") or [] if t.get("phase") in FINISHED_PHASES]
        answered = [t for t in turns if t.get("answer")]
        if not answered:
            return None
        asks = [str(t.get("ask") or "") for t in spec.get("turns") or []]
        title = asks[0] if asks else ""
        answer = str(answered[-1]["answer"])
        sections: Mapping[str, Any] = {}
        finished = max((_epoch(t.get("completionTime")) or 0.0 for t in turns), default=0.0)
        body = "\n".join([*asks, *(str(t["answer"]) for t in answered)])
        phase = str(answered[-1].get("phase") or "")
    else:
        phase = str(status.get("phase") or "")
        if phase not in FINISHED_PHASES:
            return None
        title = str(spec.get("title") or "")
        answer = str(status.get("analysis") or status.get("message") or "")
        sections = status.get("sections") or {}
        finished = _epoch(status.get("completionTime")) or 0.0
        body = "\n".join(str(v) for v in (spec.get("description"), spec.get("question"), answer) if v)
    root = next((v for k, v in sections.items() if _ROOT_CAUSE.search(k) and v), None) or answer
    resources = _involved(obj)
    return Finding(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        version=str(meta.get("resourceVersion") or ""),
        created=created,
        finished=finished or created,
        phase=phase,
        title=_text(title, 300),
        alert=_alert(obj),
        resources=resources,
        root_cause=_text(root, ROOT_CAUSE_CHARS),
        fix=_fix(obj, sections),
        body=_text(body, BODY_CHARS),
    )


@dataclass(frozen=True)
class SearchQuery:
    """What to look for. Every filter narrows; `text` ranks (BM25) when given, else the newest
    come first. `name` matches a resource and what it owns by name (`web` matches the pods
    `web-5d9c7-x2x4k`: a Deployment's ReplicaSets and Pods carry its name as a prefix)."""

    text: str = ""
    namespace: str | None = None
    kind: str | None = None
    name: str | None = None
    alert: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 10


_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL, finished REAL NOT NULL,
    alert TEXT NOT NULL, facts BLOB NOT NULL, indexed BLOB NOT NULL
);
CREATE INDEX runs_finished ON runs (finished);
CREATE INDEX runs_alert ON runs (alert COLLATE NOCASE);
CREATE TABLE involved (run INTEGER NOT NULL, namespace TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL);
CREATE INDEX involved_name ON involved (name);
CREATE INDEX involved_run ON involved (run);
CREATE VIRTUAL TABLE runs_text USING fts5 (
    title, alert_text, involved, body, content='', tokenize='porter unicode61'
);
"""
_WEIGHTS = "3.0, 2.0, 2.0, 1.0"  # bm25() column weights: title, alert, involved resources, text


def _match(text: str) -> str:
    """The terms of a free-text query as an FTS5 query: each one quoted (no FTS5 syntax
    reaches the index), any of them may match, BM25 ranks runs with more and rarer ones first."""
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(text) if len(t) <= 64))[:MAX_TERMS]
    return " OR ".join(f'"{t}"' for t in terms)


class FindingsIndex:
    """Findings by key (kind/namespace/name), kept in step with a source of objects by
    `sync` (only changed versions are read again) or by `put`/`remove`."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.executescript(_SCHEMA)
        self._versions: dict[str, tuple[int, str]] = {}  # key -> (rowid, resourceVersion)
        self._next = 1

    def __len__(self) -> int:
        return len(self._versions)

    @staticmethod
    def key(obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{obj.get('kind') or INVESTIGATION_KIND}/{meta.get('namespace', '')}/{meta.get('name', '')}"

    def sync(self, objects: Iterable[Mapping[str, Any]]) -> int:
        """Makes the index hold exactly the findings of `objects` (the current versions of every
        run); returns how many runs were (re)read."""
        seen: set[str] = set()
        changed = 0
        with self._db:
            for obj in objects:
                key = self.key(obj)
                seen.add(key)
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                known = self._versions.get(key)
                if known is not None and known[1] == version and version:
                    continue
                changed += 1
                self._put(key, obj, version)
            for key in [k for k in self._versions if k not in seen]:
                self._remove(key)
        return changed

    def put(self, obj: Mapping[str, Any]) -> None:
        self.add([obj])

    def add(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Adds (or replaces) the findings of `objects`, in one transaction."""
        with self._db:
            for obj in objects:
                self._put(self.key(obj), obj, str((obj.get("metadata") or {}).get("resourceVersion") or ""))

    def remove(self, obj: Mapping[str, Any]) -> None:
        with self._db:
            self._remove(self.key(obj))

    def _put(self, key: str, obj: Mapping[str, Any], version: str) -> None:
        finding = finding_of(obj)
        if key in self._versions:
            self._remove(key)
        if finding is None:
            return
        rowid = self._next
        self._next += 1
        involved = " ".join(f"{ns} {kind} {name}" for ns, kind, name in finding.resources)
        facts = zlib.compress(json.dumps({k: v for k, v in asdict(finding).items() if k != "body"}).encode(), 6)
        row = (finding.title, finding.alert, involved, finding.body)
        # The text index keeps no copy of the text (contentless); forgetting a row needs the
        # values it indexed, kept compressed (a third of the size), as are the facts a result shows.
        indexed = zlib.compress(json.dumps(row).encode(), 6)
        self._db.execute(
            "INSERT INTO runs (id, key, kind, namespace, finished, alert, facts, indexed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (rowid, key, finding.kind, finding.namespace, finding.finished, finding.alert, facts, indexed),
        )
        self._db.execute(
            "INSERT INTO runs_text (rowid, title, alert_text, involved, body) VALUES (?, ?, ?, ?, ?)", (rowid, *row)
        )
        self._db.executemany(
            "INSERT INTO involved (run, namespace, kind, name) VALUES (?, ?, ?, ?)",
            [(rowid, *r) for r in finding.resources],
        )
        self._versions[key] = (rowid, version)

    def _remove(self, key: str) -> None:
        entry = self._versions.pop(key, None)
        if entry is None:
            return
        rowid = entry[0]
        old = self._db.execute("SELECT indexed FROM runs WHERE id = ?", (rowid,)).fetchone()
        if old is not None:  # a contentless index forgets a row given the values it indexed
            self._db.execute(
                "INSERT INTO runs_text (runs_text, rowid, title, alert_text, involved, body) "
                "VALUES ('delete', ?, ?, ?, ?, ?)",
                (rowid, *json.loads(zlib.decompress(old[0]))),
            )
        self._db.execute("DELETE FROM runs WHERE id = ?", (rowid,))
        self._db.execute("DELETE FROM involved WHERE run = ?", (rowid,))

    def namespaces(self) -> list[tuple[str, str]]:
        """(kind, namespace) of every indexed run, for deciding what a reader may read."""
        return list(self._db.execute("SELECT DISTINCT kind, namespace FROM runs ORDER BY kind, namespace"))

    def search(
        self,
        query: SearchQuery,
        namespaces: Iterable[str] | None = None,
        now: float | None = None,
        *,
        readable: Iterable[tuple[str, str]] | None = None,
    ) -> list[dict[str, Any]]:
        """The findings that match, best first; only in `namespaces` when given, and only of the
        (kind, namespace) pairs in `readable` when given (what the reader may read: an empty
        list finds nothing)."""
        where: list[str] = []
        args: list[Any] = []
        if namespaces is not None:
            allowed = sorted(set(namespaces))
            if not allowed:
                return []
            where.append(f"runs.namespace IN ({','.join('?' * len(allowed))})")
            args += allowed
        if readable is not None:
            pairs = sorted(set(readable))
            if not pairs:
                return []
            where.append("(" + " OR ".join("(runs.kind = ? AND runs.namespace = ?)" for _ in pairs) + ")")
            args += [part for pair in pairs for part in pair]
        if query.alert:
            where.append("runs.alert = ? COLLATE NOCASE")
            args.append(query.alert)
        if query.since is not None:
            where.append("runs.finished >= ?")
            args.append(query.since)
        if query.until is not None:
            where.append("runs.finished <= ?")
            args.append(query.until)
        if query.name or query.kind or query.namespace:
            involved = []
            if query.name:  # the name, or names that start with it and a dash (a range: indexed)
                involved.append("(involved.name = ? OR (involved.name >= ? AND involved.name < ?))")
                args += [query.name, f"{query.name}-", f"{query.name}."]
            if query.kind:
                involved.append("involved.kind = ?")
                args.append(query.kind.lower())
            if query.namespace:
                involved.append("involved.namespace = ?")
                args.append(query.namespace)
            resource = f"runs.id IN (SELECT run FROM involved WHERE {' AND '.join(involved)})"
            if query.namespace and not (query.name or query.kind):  # or simply a run in that namespace
                resource = f"({resource} OR runs.namespace = ?)"
                args.append(query.namespace)
            where.append(resource)
        limit = max(1, min(int(query.limit), MAX_RESULTS))
        match = _match(query.text)
        if match:
            sql = (
                f"SELECT runs.facts, bm25(runs_text, {_WEIGHTS}) AS score FROM runs_text "
                "JOIN runs ON runs.id = runs_text.rowid WHERE runs_text MATCH ?"
                + "".join(f" AND {w}" for w in where)
                + " ORDER BY score, runs.finished DESC LIMIT ?"
            )
            rows = self._db.execute(sql, [match, *args, limit]).fetchall()
        else:
            sql = (
                "SELECT runs.facts, 0 FROM runs"
                + (" WHERE " + " AND ".join(where) if where else "")
                + " ORDER BY runs.finished DESC LIMIT ?"
            )
            rows = self._db.execute(sql, [*args, limit]).fetchall()
        results = []
        for facts, score in rows:
            data = json.loads(zlib.decompress(facts))
            data["resources"] = tuple(tuple(r) for r in data["resources"])
            result = Finding(**data, body="").result(now)
            if match:
                result["score"] = round(-float(score), 3)  # bm25() is lower for better matches
            results.append(result)
        return results
