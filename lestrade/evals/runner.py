"""Runs scenarios through the real operator: staging, the tools' raw view, Investigations, results.

One control plane, one model server, one Prometheus and one operator serve a whole run. Every
scenario's objects live in its own namespace; the Investigations live in `lestrade-eval`, the
only namespace the operator watches, and read the whole cluster (tenant isolation is off, as
for an admin's run), acting as the read-only tools account like under `make run`.

Scripted mode (`run_scripted`): the model is the scripted server playing each scenario's
reference plan; the score is evidence recall (`recall.py`). Model mode (`run_model`): the
Investigation runs with a configured model and no plan; a judge scores the answer (`judge.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from lestrade.config import ModelConfig, ModelList
from lestrade.evals.metrics import RecordedSeries
from lestrade.evals.recall import CallTrace, Recall, measure
from lestrade.evals.scenario import Scenario
from lestrade.evals.script import script_for
from lestrade.evals.staging import EVAL_LABEL, Stager
from lestrade.localcluster.processes import wait_until
from lestrade.localcluster.toolsaccount import ensure_tools_account
from lestrade.modelserver import ScriptedModelServer
from lestrade.operator.__main__ import run_operator
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.context import default_tools
from lestrade.operator.tools.base import ToolOutput, ToolRegistry
from lestrade.operator.tools.common import FunctionTool, Params
from lestrade.operator.tools.redact import redact_async
from lestrade.resources.install import install_crds

__all__ = ["EVAL_NAMESPACE", "Environment", "RunResult", "run_scripted", "run_investigations"]

EVAL_NAMESPACE = "lestrade-eval"
GROUP, VERSION, PLURAL = "lestrade.dev", "v1alpha1", "investigations"

log = logging.getLogger(__name__)


@dataclass
class Environment:
    """What a run needs: the cluster's admin client, a folder, Prometheus (optional)."""

    api_client: k8s.ApiClient
    workdir: Path
    prometheus_url: str | None = None
    series: RecordedSeries | None = None
    run_timeout: float = 300.0
    parallel: int = 4


@dataclass
class RunResult:
    """One scenario's Investigation as it ended, with what the harness saw."""

    scenario: Scenario
    investigation: dict[str, Any] = field(default_factory=dict)
    traces: list[CallTrace] = field(default_factory=list)
    seconds: float = 0.0
    """The Investigation's run, from creation to its end."""
    staging_seconds: float = 0.0
    """Staging and waiting until the tools show the evidence."""
    error: str | None = None
    unoffered: list[str] = field(default_factory=list)
    """Planned calls the model would not have been offered (`unoffered_calls`)."""

    @property
    def status(self) -> dict[str, Any]:
        return self.investigation.get("status") or {}


class OperatorThread:
    """The product's operator (`run_operator`, product tools) in a thread, watching one namespace."""

    def __init__(
        self, api_client_factory: Callable[[], k8s.ApiClient], settings: OperatorSettings, models: ModelList
    ) -> None:
        self._factory = api_client_factory
        self.settings = settings
        self.models = models
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="eval-operator", daemon=True)

    def _main(self) -> None:
        client = self._factory()
        try:
            asyncio.run(
                run_operator(
                    self.settings,
                    namespaces=[EVAL_NAMESPACE],
                    standalone=True,
                    models=self.models,
                    api_client=client,
                    stop_flag=self._stop,
                    ready_flag=self._ready,
                )
            )
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            client.close()
            self._ready.set()

    def __enter__(self) -> OperatorThread:
        self._thread.start()
        if not self._ready.wait(120) or self.error:
            raise RuntimeError(f"the operator did not start: {self.error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error:
            raise RuntimeError("the operator failed during the evaluation") from self.error


def operator_settings(env: Environment, tools_account: str) -> OperatorSettings:
    return OperatorSettings.from_env(
        {},
        tenancy={"tools_service_account": tools_account},
        tools={"prometheus_url": env.prometheus_url},
        status={"interval": 0.2},
        jobs={"namespace": EVAL_NAMESPACE},
        replicas={"lease_namespace": EVAL_NAMESPACE},
        spend={"ledger_namespace": EVAL_NAMESPACE},
    )


def _ensure_namespace(core: k8s.CoreV1Api, name: str) -> None:
    try:
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise


def _clear_namespace(core: k8s.CoreV1Api, name: str) -> None:
    """A namespace of an earlier run of the same scenario is deleted first (waiting until gone)."""
    try:
        core.delete_namespace(name)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return
        raise

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    wait_until(f"namespace {name} of an earlier run to be deleted", gone, timeout=180)


def _wait_deleted(core: k8s.CoreV1Api, namespaces: list[str]) -> None:
    names = set(namespaces)

    def gone() -> bool:
        return not names & {n.metadata.name for n in core.list_namespace(label_selector=f"{EVAL_LABEL}=true").items}

    try:
        wait_until("the scenarios' namespaces to be deleted", gone, timeout=180, interval=1.0)
    except Exception as exc:  # noqa: BLE001 — reported, not fatal: the results stand
        log.warning("%s", exc)


async def trace_plan(registry: ToolRegistry, scenario: Scenario) -> list[CallTrace]:
    """Runs the plan's calls outside the run: raw output (before redaction and caps) and redacted."""

    async def one(call_id: str, tool_name: str, args: dict[str, Any]) -> CallTrace:
        tool = registry.get(tool_name)
        if tool is None:
            return CallTrace(call_id, tool_name, tool_missing=True)
        if isinstance(tool, FunctionTool):
            try:
                out = await tool.handler(Params(args))
            except Exception as exc:  # noqa: BLE001 — what the tool would have said
                out = ToolOutput("error", error=f"{type(exc).__name__}: {exc}")
            raw = out.text() if isinstance(out, ToolOutput) else str(out)
        else:
            raw = (await tool.run(args)).text()
        return CallTrace(call_id, tool_name, raw=raw, redacted=await redact_async(raw))

    return list(await asyncio.gather(*(one(c.id or "", c.tool, c.args) for c in scenario.calls())))


def unoffered_calls(registry: ToolRegistry, scenario: Scenario) -> list[str]:
    """The plan's calls of tools not offered at their turn: a deferred toolset must be opened
    (`open_toolset`, or a call of one of its tools) in an earlier turn, as a model must."""
    problems: list[str] = []
    history: list[dict[str, Any]] = []
    for turn in scenario.plan:
        offered = {t.name for t in registry.offered_tools(registry.opened_in(history))}
        problems += [
            f"{c.id} calls {c.tool}, not offered yet (open its toolset in an earlier turn)"
            for c in turn
            if c.tool not in offered and registry.get(c.tool) is not None
        ]
        calls = [{"function": {"name": c.tool, "arguments": json.dumps(c.args)}} for c in turn]
        history.append({"role": "assistant", "tool_calls": calls})
    return problems


async def wait_for_evidence(registry: ToolRegistry, scenario: Scenario, stager: Stager) -> list[CallTrace]:
    """Traces of the plan once its raw outputs hold every fact (controllers, KWOK and Prometheus
    need a moment), or the last traces at the scenario's timeout (the report then says where)."""
    deadline = time.monotonic() + scenario.ready_timeout
    while True:
        await asyncio.to_thread(stager.serve_logs, scenario)  # pods a controller made since
        traces = await trace_plan(registry, scenario)
        raw = "\n".join(t.raw for t in traces)
        if all(f.found_in(raw) for f in scenario.evidence) or time.monotonic() > deadline:
            return traces
        await asyncio.sleep(1.0)  # polling the cluster's state, bounded by the deadline


def investigation_body(scenario: Scenario, model: str, *, max_steps: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "title": scenario.title,
        "source": "kubernetes",
        "model": model,
        "enableToolApproval": False,
        "maxSteps": max_steps,
        "timeout": "10m",
    }
    for key in ("description", "question"):
        if getattr(scenario, key):
            spec[key] = getattr(scenario, key)
    if scenario.subject:
        spec["subject"] = scenario.subject
    if scenario.context:
        spec["context"] = scenario.context
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Investigation",
        "metadata": {
            "name": scenario.name,
            "namespace": EVAL_NAMESPACE,
            "labels": {EVAL_LABEL: scenario.name},
        },
        "spec": spec,
    }


async def _finished(custom: k8s.CustomObjectsApi, name: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        obj = await asyncio.to_thread(custom.get_namespaced_custom_object, GROUP, VERSION, EVAL_NAMESPACE, PLURAL, name)
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") or time.monotonic() > deadline:  # type: ignore[operator,attr-defined]
            return obj  # type: ignore[return-value]
        await asyncio.sleep(0.5)  # polling the Investigation's phase, bounded by the deadline


async def run_investigations(
    env: Environment,
    scenarios: Sequence[Scenario],
    models: ModelList,
    model_for: Callable[[Scenario], str],
    *,
    max_steps: Callable[[Scenario], int],
) -> list[RunResult]:
    """Stages every scenario, waits for its evidence, runs its Investigation with
    `model_for(scenario)` through the operator, and returns how each ended."""
    core = k8s.CoreV1Api(env.api_client)
    custom = k8s.CustomObjectsApi(env.api_client)
    _kubectl_on_path()
    await asyncio.to_thread(install_crds, env.api_client, wait=True, timeout=60)
    await asyncio.to_thread(_ensure_namespace, core, EVAL_NAMESPACE)
    tools_account = await asyncio.to_thread(ensure_tools_account, env.api_client)
    settings = operator_settings(env, tools_account)
    factory = default_tools(settings)
    registry = await asyncio.to_thread(factory, env.api_client)
    stager = Stager(env.api_client, env.workdir / "logs")
    gate = asyncio.Semaphore(env.parallel)

    async def one(scenario: Scenario) -> RunResult:
        result = RunResult(scenario, unoffered=unoffered_calls(registry, scenario))
        async with gate:
            begun = time.monotonic()
            try:
                await asyncio.to_thread(_clear_namespace, core, scenario.namespace)
                await _delete_investigation(custom, scenario.name)
                await asyncio.to_thread(stager.stage, scenario)
                if env.series is not None:
                    env.series.add(scenario.metrics)
                result.traces = await wait_for_evidence(registry, scenario, stager)
                result.staging_seconds = time.monotonic() - begun
            except Exception as exc:  # noqa: BLE001 — one broken scenario must not hide the others
                log.exception("staging %s failed", scenario.name)
                result.error = f"staging failed: {type(exc).__name__}: {exc}"
                return result
        started = time.monotonic()
        body = investigation_body(scenario, model_for(scenario), max_steps=max_steps(scenario))
        await asyncio.to_thread(custom.create_namespaced_custom_object, GROUP, VERSION, EVAL_NAMESPACE, PLURAL, body)
        result.investigation = await _finished(custom, scenario.name, env.run_timeout)
        result.seconds = time.monotonic() - started
        return result

    try:
        with OperatorThread(lambda: _clone(env.api_client), settings, models):
            return list(await asyncio.gather(*(one(s) for s in scenarios)))
    finally:
        for scenario in scenarios:
            try:
                await asyncio.to_thread(stager.unstage, scenario)
            except Exception as exc:  # noqa: BLE001 — cleanup is best effort
                log.warning("cleaning up %s: %s", scenario.name, exc)
        # Gone before returning: on a shared cluster, a terminating namespace's objects would
        # still show up in whole-cluster lists of whatever runs next.
        await asyncio.to_thread(_wait_deleted, core, [s.namespace for s in scenarios])


async def _delete_investigation(custom: k8s.CustomObjectsApi, name: str) -> None:
    try:
        await asyncio.to_thread(custom.delete_namespaced_custom_object, GROUP, VERSION, EVAL_NAMESPACE, PLURAL, name)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
        return

    async def gone() -> None:
        while True:
            try:
                await asyncio.to_thread(
                    custom.get_namespaced_custom_object, GROUP, VERSION, EVAL_NAMESPACE, PLURAL, name
                )
            except k8s.ApiException as exc:
                if exc.status == 404:
                    return
                raise
            await asyncio.sleep(0.5)  # polling the deletion, bounded by wait_for below

    await asyncio.wait_for(gone(), 120)


def _kubectl_on_path() -> None:
    """Bash's kubectl is found on PATH (as in the image); without one, the pinned kubectl of
    the local control plane is put there."""
    if shutil.which("kubectl"):
        return
    from lestrade.localcluster.build import ensure_binaries

    folder = str(ensure_binaries(["kubernetes"], quiet=True)["kubectl"].parent)
    os.environ["PATH"] = os.pathsep.join([folder, os.environ.get("PATH", "/usr/bin:/bin")])


def _clone(api_client: k8s.ApiClient) -> k8s.ApiClient:
    """A client of its own for the operator's thread (the kubernetes client is not shared
    across event loops), with the same configuration."""
    return k8s.ApiClient(api_client.configuration)


async def run_scripted(env: Environment, server: ScriptedModelServer, scenarios: Sequence[Scenario]) -> list[Recall]:
    """Every scenario's reference plan through the operator; the recall of each."""
    run_id = uuid.uuid4().hex[:6]
    names = {s.name: f"eval-{s.name}-{run_id}" for s in scenarios}
    for scenario in scenarios:
        server.add_scenario(script_for(scenario, names[scenario.name]))
    models = ModelList(
        {n: ModelConfig(n, server.litellm_params(n)) for n in names.values()}, next(iter(names.values()), None)
    )
    results = await run_investigations(
        env, scenarios, models, lambda s: names[s.name], max_steps=lambda s: len(s.plan) + 2
    )
    recalls = []
    for result in results:
        status = result.status
        recall = measure(
            result.scenario,
            server.requests(names[result.scenario.name]),
            result.traces,
            sections=status.get("sections") or {},
            call_ids=[c.get("id") for c in status.get("toolCalls") or []],
            tokens=int((status.get("usage") or {}).get("totalTokens") or 0),
            phase=status.get("phase") or ("" if not result.error else "NotRun"),
            message=result.error or status.get("message") or "",
        )
        recall.seconds, recall.staging_seconds = result.seconds, result.staging_seconds
        recall.unoffered = result.unoffered
        recalls.append(recall)
    return recalls


def _transcript(api_client: k8s.ApiClient, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's messages, as stored (everything the model was given, compacted or not)."""
    from lestrade.runs.transcript import CHUNK_LABEL, TRANSCRIPT_LABEL, decode_chunks

    uid = (obj.get("metadata") or {}).get("uid")
    if not uid:
        return []
    found = k8s.CoreV1Api(api_client).list_namespaced_config_map(
        EVAL_NAMESPACE, label_selector=f"{TRANSCRIPT_LABEL}={uid}"
    )
    items = sorted(found.items, key=lambda cm: int(cm.metadata.labels[CHUNK_LABEL]))
    return list(decode_chunks([cm.data or {} for cm in items]).messages)


async def run_model(
    env: Environment,
    scenarios: Sequence[Scenario],
    models: ModelList,
    model: str,
    judge_model: str,
    *,
    max_steps: int = 20,
) -> dict[str, Any]:
    """Model mode: each scenario investigated freely by `model`, judged by `judge_model`."""
    from lestrade.evals.judge import ScenarioReport, build_report, evidence_seen, grounding_problems, judge

    judge_config = models.get(judge_model)
    results = await run_investigations(env, scenarios, models, lambda s: model, max_steps=lambda s: max_steps)
    rows = []
    for result in results:
        status = result.status
        answer = status.get("analysis") or ""
        verdict = await judge(judge_config, result.scenario, answer)
        messages = await asyncio.to_thread(_transcript, env.api_client, result.investigation)
        usage = status.get("usage") or {}
        call_ids = [c.get("id") for c in status.get("toolCalls") or []]
        rows.append(
            ScenarioReport(
                scenario=result.scenario.name,
                category=result.scenario.category,
                passed=verdict.error is None and verdict.root_cause_found,
                verdict=verdict,
                phase=status.get("phase") or "NotRun",
                seconds=round(result.seconds, 1),
                tokens=int(usage.get("totalTokens") or 0),
                cost=float(usage.get("cost") or 0.0),
                tool_calls=int(status.get("toolCallCount") or len(call_ids)),
                evidence_seen=evidence_seen(result.scenario, messages),
                evidence_total=len(result.scenario.evidence),
                grounding=grounding_problems(status.get("sections") or {}, call_ids) if answer else ["no answer"],
            )
        )
    return build_report(model, judge_model, rows)
