"""Helpers for the operator tests: an operator in a thread or a subprocess, test tools, waits.

The operator under test is the product's own `run_operator` (or `python -m lestrade.operator`
for the kill -9 tests), restricted to the test's namespace so tests cannot see each other's
Investigations. The tools added here have effects a test can count in the cluster (a ConfigMap
per execution), which is how "executed exactly once" is checked.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml
from kubernetes import client as k8s
from kubernetes import watch

from lestrade.config import ModelConfig, ModelList
from lestrade.operator.__main__ import run_operator
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.tools.base import ToolOutput, ToolRegistry, Toolset
from lestrade.operator.tools.kubernetes.toolset import kubernetes_toolset

__all__ = [
    "GROUP",
    "VERSION",
    "PLURAL",
    "EFFECT_LABEL",
    "PROBE_LABEL",
    "READ_LABEL",
    "OperatorThread",
    "OperatorProcess",
    "test_registry",
    "model_list",
    "write_model_list",
    "investigation",
    "create_inv",
    "get_inv",
    "patch_status",
    "patch_decisions",
    "wait_inv",
    "watch_phases",
    "count_effects",
    "wait_until",
    "transcript_messages",
    "events_for",
]

GROUP, VERSION, PLURAL = "lestrade.dev", "v1alpha1", "investigations"
EFFECT_LABEL = "lestrade.test/effect"
PROBE_LABEL = "lestrade.test/probe"
READ_LABEL = "lestrade.test/read"
HERE = Path(__file__).parent


# -- test tools --------------------------------------------------------------------------------


def _marker(api_client: k8s.ApiClient, namespace: str, label: str, tag: str) -> None:
    k8s.CoreV1Api(api_client).create_namespaced_config_map(
        namespace,
        k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(generate_name=f"{label.split('/')[-1]}-", labels={label: tag})),
    )


@dataclass
class ApplyFix:
    """A write action that needs approval; each execution leaves one labelled ConfigMap."""

    api_client: k8s.ApiClient
    name: str = "apply_fix"
    description: str = "Apply a fix (a write action; needs approval). Leaves a record ConfigMap."
    parameters: dict[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {
                "namespace": {"type": "string"},
                "tag": {"type": "string"},
                "hold_seconds": {"type": "number"},
            },
            "required": ["namespace", "tag"],
        }
    )

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return True

    def describe(self, params: dict[str, Any]) -> str:
        return f"apply fix {params.get('tag')} in {params.get('namespace')}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        await asyncio.to_thread(_marker, self.api_client, params["namespace"], EFFECT_LABEL, params["tag"])
        if params.get("hold_seconds"):
            await asyncio.sleep(float(params["hold_seconds"]))
        return ToolOutput(status="success", data=f"fix {params['tag']} applied")


@dataclass
class SlowProbe:
    """A read-only tool that takes a while; it records that it started before it waits."""

    api_client: k8s.ApiClient
    name: str = "slow_probe"
    description: str = "Probe something slowly."
    parameters: dict[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {
                "namespace": {"type": "string"},
                "tag": {"type": "string"},
                "seconds": {"type": "number"},
            },
            "required": ["namespace", "tag"],
        }
    )

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        return f"slow probe {params.get('tag')}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        await asyncio.to_thread(_marker, self.api_client, params["namespace"], PROBE_LABEL, params["tag"])
        await asyncio.sleep(float(params.get("seconds") or 0))
        return ToolOutput(status="success", data=f"probe {params['tag']}: all good")


@dataclass
class ReadProbe:
    """A read the tool declares read-only (its toolset does), so a restart runs it again.

    Each execution leaves one labelled ConfigMap (so a test can count them); only the first
    execution for a tag waits `seconds` (a kill lands while it waits; the run after the
    restart then answers at once)."""

    api_client: k8s.ApiClient
    name: str = "read_probe"
    description: str = "Read something (read-only)."
    parameters: dict[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {
                "namespace": {"type": "string"},
                "tag": {"type": "string"},
                "seconds": {"type": "number"},
            },
            "required": ["namespace", "tag"],
        }
    )

    def needs_approval(self, params: dict[str, Any]) -> bool:
        return False

    def describe(self, params: dict[str, Any]) -> str:
        return f"read probe {params.get('tag')}"

    async def run(self, params: dict[str, Any]) -> ToolOutput:
        namespace, tag = params["namespace"], params["tag"]
        earlier = await asyncio.to_thread(count_effects, self.api_client, namespace, READ_LABEL, tag)
        await asyncio.to_thread(_marker, self.api_client, namespace, READ_LABEL, tag)
        if not earlier:
            await asyncio.sleep(float(params.get("seconds") or 0))
        return ToolOutput(status="success", data=f"read {tag}: 3 pods ready")


def test_registry(api_client: k8s.ApiClient) -> ToolRegistry:
    """The read-only Kubernetes tools plus the test tools (`read_probe` declared read-only)."""
    return ToolRegistry(
        [
            kubernetes_toolset(api_client),
            Toolset("test-actions", [ApplyFix(api_client), SlowProbe(api_client)]),
            Toolset("test-reads", [ReadProbe(api_client)], read_only=True),
        ]
    )


test_registry.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


# -- models ------------------------------------------------------------------------------------


def model_list(server: Any, *scenarios: str) -> ModelList:
    """A model list whose entries are named like the scenarios they play (first = default)."""
    models = {s: ModelConfig(s, server.litellm_params(s)) for s in scenarios}
    return ModelList(models, scenarios[0] if scenarios else None)


def write_model_list(path: Path, server: Any, *scenarios: str) -> Path:
    path.write_text(yaml.safe_dump({s: server.litellm_params(s) for s in scenarios}))
    return path


# -- operators ---------------------------------------------------------------------------------


def grouped(flat: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`runs_concurrency=2` → `runs={"concurrency": 2}`: a test names a setting by its group and
    field in one keyword (`OperatorSettings.from_env` refuses an unknown one)."""
    groups: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        group, _, name = key.partition("_")
        groups.setdefault(group, {})[name] = value
    return groups


class OperatorThread:
    """The operator (the product's `run_operator`) in a thread with its own event loop."""

    def __init__(
        self,
        cluster: Any,
        namespace: str,
        models: ModelList,
        *,
        tools: Callable[[k8s.ApiClient], ToolRegistry] | None = test_registry,
        session_factory: Callable[..., Any] | None = None,
        **settings: Any,
    ) -> None:
        """`session_factory`: the operator's transport seam (`lestrade.kube.Kube`)."""
        self.cluster = cluster
        self.namespace = namespace
        self.models = models
        self.tools = tools
        self.session_factory = session_factory
        self.settings = OperatorSettings.from_env(
            {}, **grouped({"jobs_namespace": namespace, "status_interval": 0.1, **settings})
        )
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.error: BaseException | None = None

    def _main(self) -> None:
        api_client = self.cluster.api_client()
        try:
            asyncio.run(
                run_operator(
                    self.settings,
                    namespaces=[self.namespace],
                    standalone=True,
                    models=self.models,
                    api_client=api_client,
                    tools=self.tools,
                    liveness_endpoint=self.settings.process.liveness,  # `process_liveness=`
                    stop_flag=self._stop,
                    ready_flag=self._ready,
                    **({"session_factory": self.session_factory} if self.session_factory else {}),
                )
            )
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            api_client.close()
            self._ready.set()

    def start(self) -> OperatorThread:
        self._thread = threading.Thread(target=self._main, name="operator", daemon=True)
        self._thread.start()
        if not self._ready.wait(60) or self.error:
            raise RuntimeError(f"operator did not start: {self.error!r}")
        return self

    def stop(self) -> None:
        """Stops the operator; raises what ended it if it ended by itself (a crash) before."""
        if self._stopped:
            return
        self._stopped = True
        exited_early = self._thread is not None and not self._thread.is_alive()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            assert not self._thread.is_alive(), "operator thread did not stop"
        if self.error:
            raise RuntimeError("the operator thread failed") from self.error
        if exited_early:
            raise RuntimeError("the operator thread exited before the test stopped it")

    def __enter__(self) -> OperatorThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class OperatorProcess:
    """`python -m lestrade.operator` (or the test launcher with the test tools) as a process.

    Every one started is in `OperatorProcess.started` until `kill_leftovers()` (the operator
    tests' autouse fixture) kills those a failed test left running: one outlived its test
    session by an hour, retrying a cluster that was gone."""

    started: ClassVar[list[OperatorProcess]] = []

    def __init__(
        self,
        cluster: Any,
        namespace: str,
        model_list_file: Path,
        log: Path,
        *,
        test_tools: bool = True,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        module = [str(HERE / "opkit_launch.py")] if test_tools else ["-m", "lestrade.operator"]
        self.argv = [sys.executable, *module, "--namespace", namespace, *(extra_args or ["--standalone"])]
        self.env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "LESTRADE_MODEL_LIST": str(model_list_file),
            "LESTRADE_STATUS_INTERVAL": "0.1",
            "LESTRADE_JOB_NAMESPACE": namespace,
            **(env or {}),
        }
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        handle = open(self.log, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=handle, stderr=subprocess.STDOUT)
        handle.close()
        OperatorProcess.started.append(self)
        return self

    @classmethod
    def kill_leftovers(cls) -> None:
        """SIGKILL to every started process still running (a test that failed before it
        stopped its operators), then forget them all."""
        for each in cls.started:
            if each.alive():
                each.kill()
        cls.started.clear()

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind happens in the operator."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 60) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


# -- resources ---------------------------------------------------------------------------------


def investigation(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Investigation",
        "metadata": {"name": name},
        "spec": {"title": f"Investigate {name}", **spec},
    }


def create_inv(api_client: k8s.ApiClient, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, investigation(name, **spec)
    )


def get_inv(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def patch_status(api_client: k8s.ApiClient, namespace: str, name: str, **status: Any) -> None:
    """Status fields as an earlier operator left them (a merge patch of the status)."""
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": status}, _content_type="application/merge-patch+json"
    )


def patch_decisions(api_client: k8s.ApiClient, namespace: str, name: str, decisions: dict[str, Any]) -> dict[str, Any]:
    """What `kubectl patch inv NAME --type merge -p '{"spec":{"decisions":...}}'` sends."""
    return k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"spec": {"decisions": decisions}},
        _content_type="application/merge-patch+json",
    )


def resource_version(api_client: k8s.ApiClient, namespace: str) -> str:
    """The namespace's current Investigation list version: watch from here to see everything."""
    return k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, limit=1)[
        "metadata"
    ]["resourceVersion"]


__all__.append("resource_version")


def watch_phases(
    api_client: k8s.ApiClient,
    namespace: str,
    name: str,
    until: Callable[[dict[str, Any]], bool],
    timeout: float = 60,
    since: str | None = None,
    plural: str = PLURAL,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Watches the object until `until(obj)`; returns it and every version seen on the way.

    With `since` (a resource version taken before the test acted, see `resource_version`) the
    watch replays every change from then on, so nothing that happened in between is missed.
    Without it the object is listed first; when the list does not hold it, the object is gone
    (deleted before the list, or not created yet) and `until` is asked about
    `{"metadata": {"name": name}, "deleted": True}`: a watch started after a deletion never
    reports it. A deleted object is passed to `until` with `"deleted": True` added."""
    custom = k8s.CustomObjectsApi(api_client)
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    if since is None:
        listing = custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, field_selector=f"metadata.name={name}"
        )
        items = listing["items"] or [{"metadata": {"name": name, "namespace": namespace}, "deleted": True}]
        for item in items:
            seen.append(item)
            if until(item):
                return item, seen
        since = listing["metadata"]["resourceVersion"]
    version = since
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            last = seen[-1] if seen else None
            raise TimeoutError(
                f"{namespace}/{name} did not reach the condition in {timeout}s; saw {len(seen)} "
                f"version(s); last status: {json.dumps((last or {}).get('status'), indent=1)[:3000]}"
            )
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            field_selector=f"metadata.name={name}",
            resource_version=version,
            timeout_seconds=max(1, int(left)),
            allow_watch_bookmarks=False,
        )
        for event in stream:
            obj = event["object"]
            version = obj["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                obj = {**obj, "deleted": True}
            seen.append(obj)
            if until(obj):
                stream.close()
                return obj, seen


def wait_inv(
    api_client: k8s.ApiClient,
    namespace: str,
    name: str,
    until: Callable[[dict[str, Any]], bool],
    timeout: float = 60,
) -> dict[str, Any]:
    return watch_phases(api_client, namespace, name, until, timeout)[0]


def phase_is(*phases: str) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


__all__.append("phase_is")


def count_effects(api_client: k8s.ApiClient, namespace: str, label: str, tag: str) -> int:
    found = k8s.CoreV1Api(api_client).list_namespaced_config_map(namespace, label_selector=f"{label}={tag}")
    return len(found.items)


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60, interval: float = 0.05) -> Any:
    """Polls `check` until it returns something truthy (for conditions no watch can deliver,
    such as the model server's request log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def transcript_messages(api_client: k8s.ApiClient, obj: dict[str, Any]) -> Any:
    """The decoded transcript of an Investigation (via the product's decoder)."""
    from lestrade.runs.transcript import TRANSCRIPT_LABEL, decode_chunks

    found = k8s.CoreV1Api(api_client).list_namespaced_config_map(
        obj["metadata"]["namespace"], label_selector=f"{TRANSCRIPT_LABEL}={obj['metadata']['uid']}"
    )
    items = sorted(found.items, key=lambda cm: int(cm.metadata.labels["lestrade.dev/transcript-chunk"]))
    return decode_chunks([cm.data or {} for cm in items]), items


def events_for(api_client: k8s.ApiClient, namespace: str, name: str) -> list[Any]:
    found = k8s.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return list(found.items)


def wait_event(api_client: k8s.ApiClient, namespace: str, name: str, *reasons: str, timeout: float = 30) -> list[Any]:
    """Watches the Events about `name` until one of each reason arrived (they are posted in
    the background, so they may land after the status that announced the milestone)."""
    core = k8s.CoreV1Api(api_client)
    missing, seen = set(reasons), []
    stream = watch.Watch().stream(
        core.list_namespaced_event,
        namespace,
        field_selector=f"involvedObject.name={name}",
        timeout_seconds=int(timeout),
    )
    for event in stream:
        seen.append(event["object"])
        missing.discard(event["object"].reason)
        if not missing:
            return seen
    raise TimeoutError(
        f"no {sorted(missing)} Event for {namespace}/{name} in {timeout}s; saw {[e.reason for e in seen]}"
    )


__all__.append("wait_event")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


__all__.append("unique")


def install_policy(api_client: k8s.ApiClient, namespace: str) -> None:
    """Installs the decisions admission policy and waits until the apiserver enforces it."""
    from lestrade.kube import Kube
    from lestrade.operator.admission.decisions import install_admission_policy

    async def apply() -> None:
        kube = Kube(api_client)
        try:
            assert await install_admission_policy(kube)
        finally:
            await kube.aclose()

    worker = threading.Thread(target=lambda: asyncio.run(apply()))
    worker.start()
    worker.join()
    probe = unique("policy-probe")
    create_inv(api_client, namespace, probe)

    attempts = iter(range(10_000))

    def enforced() -> bool:
        # A new bogus id each time: once the policy is active, even removing one is refused.
        try:
            patch_decisions(api_client, namespace, probe, {f"no-such-call-{next(attempts)}": {"approved": True}})
        except k8s.ApiException as exc:
            return exc.status == 422
        return False

    wait_until("the decisions admission policy to be enforced", enforced, timeout=30, interval=0.2)
    k8s.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, probe)


__all__.append("install_policy")


# -- Job mode ----------------------------------------------------------------------------------

UNSCHEDULABLE = {"spec": {"nodeSelector": {"lestrade.test/no-such-node": "true"}}}
"""A Job pod template no node matches, so KWOK does not fake-complete the Jobs' pods."""


def jobs_of(api_client: k8s.ApiClient, namespace: str, uid: str) -> list[Any]:
    from lestrade.operator.runs.jobs import RUN_UID_LABEL

    return k8s.BatchV1Api(api_client).list_namespaced_job(namespace, label_selector=f"{RUN_UID_LABEL}={uid}").items


__all__ += ["UNSCHEDULABLE", "jobs_of"]
