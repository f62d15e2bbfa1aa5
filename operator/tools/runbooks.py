"""Runbooks: troubleshooting guides the model fetches by name.

Sources, in precedence order: folders of markdown files given by the operator's configuration,
the built-in runbooks shipped in `lestrade.operator.tools.builtin_runbooks`, and ConfigMaps labelled
`lestrade.dev/runbook=true` (each data key is a runbook; `.md` is dropped from the name), so a
team can add runbooks with `kubectl apply` and no restart.

ConfigMap runbooks are read only from the namespaces the operator is configured with (its own
namespace by default, `LESTRADE_RUNBOOK_NAMESPACES` / the chart's `tools.runbookNamespaces`),
never cluster-wide: a runbook is an instruction the model follows, and any tenant who can create
a ConfigMap in their own namespace must not be able to write one.

One tool, `fetch_runbook`: with a name it returns the runbook; without one it lists them all.
File runbooks are also listed in the toolset instructions, so the model knows they exist
before it calls anything.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

from lestrade.operator.tools.base import ToolOutput, Toolset
from lestrade.operator.tools.common import FunctionTool, Params, schema
from lestrade.operator.tools.kubernetes.api import KubeApi, KubeError
from lestrade.resources.keys import RUNBOOK_LABEL

__all__ = ["RUNBOOK_LABEL", "Runbook", "load_runbook_dir", "builtin_runbooks", "runbooks_toolset"]

_MAX_RUNBOOK_CHARS = 40_000


@dataclass(frozen=True)
class Runbook:
    name: str
    title: str
    summary: str
    text: str
    source: str


def _parse(name: str, text: str, source: str) -> Runbook:
    title = name
    summary = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# ") and title == name:
            title = stripped[2:].strip()
        elif stripped.lower().startswith("use when:") and not summary:
            summary = stripped[len("use when:") :].strip()
    if not summary:
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip() and not p.strip().startswith("#")]
        summary = paragraphs[0].splitlines()[0] if paragraphs else ""
    return Runbook(name=name, title=title, summary=summary[:160], text=text[:_MAX_RUNBOOK_CHARS], source=source)


def _runbook_name(filename: str) -> str:
    return re.sub(r"\.(md|markdown)$", "", filename, flags=re.IGNORECASE)


def load_runbook_dir(folder: str | Path) -> list[Runbook]:
    root = Path(folder)
    if not root.is_dir():
        return []
    return [
        _parse(_runbook_name(p.name), p.read_text(encoding="utf-8", errors="replace"), str(p))
        for p in sorted(root.glob("*.md"))
    ]


def builtin_runbooks() -> list[Runbook]:
    return list(_builtin_runbooks())


@functools.cache
def _builtin_runbooks() -> tuple[Runbook, ...]:
    """Read once: they ship with the package, and every run's registry lists them."""
    files = resources.files("lestrade.operator.tools.builtin_runbooks")
    return tuple(
        _parse(_runbook_name(f.name), f.read_text(encoding="utf-8"), f"builtin:{f.name}")
        for f in sorted(files.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".md")
    )


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class _Catalog:
    def __init__(self, files: list[Runbook], api: KubeApi | None, namespaces: list[str]) -> None:
        self.files: dict[str, Runbook] = {}
        for runbook in files:
            self.files.setdefault(runbook.name, runbook)  # earlier sources win
        self.api = api
        self.namespaces = namespaces

    async def from_configmaps(self) -> list[Runbook]:
        if self.api is None:
            return []
        items: list[dict[str, Any]] = []
        for namespace in self.namespaces:
            try:
                data = await self.api.get_json(
                    f"/api/v1/namespaces/{namespace}/configmaps", {"labelSelector": f"{RUNBOOK_LABEL}=true"}
                )
            except KubeError:
                continue  # no permission there: the other sources still work
            items += data.get("items") or []
        out = []
        items.sort(key=lambda i: (i["metadata"].get("namespace", ""), i["metadata"]["name"]))
        for item in items:
            meta = item["metadata"]
            for key, text in sorted((item.get("data") or {}).items()):
                out.append(_parse(_runbook_name(key), text, f"configmap {meta.get('namespace')}/{meta['name']}"))
        return out

    async def all(self) -> list[Runbook]:
        merged = dict(self.files)
        for runbook in await self.from_configmaps():
            merged.setdefault(runbook.name, runbook)
        return list(merged.values())

    async def fetch(self, p: Params) -> ToolOutput | str:
        name = p.opt_str("name")
        if not name:
            runbooks = await self.all()
            if not runbooks:
                return ToolOutput(status="no_data", data="No runbooks are configured.")
            return "Runbooks:\n" + "\n".join(
                f"- {r.name}: {r.title}" + (f" — {r.summary}" if r.summary else "") for r in runbooks
            )
        wanted = _runbook_name(name.strip()).lower()
        runbooks = await self.all() if wanted not in self.files else [self.files[wanted]]
        found = next((r for r in runbooks if r.name.lower() == wanted), None)
        if found is None:
            names = ", ".join(r.name for r in await self.all()) or "none"
            return ToolOutput(status="error", error=f"no runbook named '{name}'; available: {names}")
        return f"Runbook {found.name} (from {found.source}):\n\n{found.text}"


def runbooks_toolset(
    runbook_dirs: list[str | Path] | None = None,
    *,
    api_client: ApiClient | None = None,
    configmap_namespaces: list[str] | None = None,
    include_builtin: bool = True,
) -> Toolset:
    """`fetch_runbook` over `runbook_dirs`, the built-in runbooks and labelled ConfigMaps in
    `configmap_namespaces` (none given: no ConfigMap runbooks)."""
    namespaces = list(dict.fromkeys(configmap_namespaces or []))
    bad = [n for n in namespaces if not _NAMESPACE.match(n)]
    if bad:
        raise ValueError(f"not a namespace name: {bad[0]!r}")
    if api_client is None:
        namespaces = []
    files: list[Runbook] = []
    for folder in runbook_dirs or []:
        files += load_runbook_dir(folder)
    if include_builtin:
        files += builtin_runbooks()
    catalog = _Catalog(files, KubeApi(api_client) if namespaces and api_client is not None else None, namespaces)
    listing = "\n".join(f"- {r.name}: {r.title}" for r in catalog.files.values())
    instructions = (
        "Runbooks: when one matches the problem, fetch_runbook it first and follow it."
        + (f" Available:\n{listing}" if listing else "")
        + ("\nMore may live in ConfigMaps: fetch_runbook without a name lists all." if namespaces else "")
    )
    tool = FunctionTool(
        "fetch_runbook",
        "A troubleshooting runbook by name; no name lists them.",
        schema(None, name={"type": "string"}),
        catalog.fetch,
        lambda p: f"fetch runbook {p.opt_str('name') or '(list)'}",
    )
    return Toolset(name="runbooks", tools=[tool], instructions=instructions, read_only=True)
