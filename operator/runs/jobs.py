"""Scale-out mode: each round of a run happens in a Kubernetes Job, not in the operator.

With `LESTRADE_JOB_MODE=true` the operator does not run the agent itself; for every round (the
first attempt, and the next one after each set of decisions or each new Conversation turn) it
creates a Job (same image, same engine) whose pod runs `python -m lestrade.operator.job` —
exactly one attempt, resumed from the transcript, writing status as the operator would. So the
load spreads over the cluster's nodes, and a pod that dies is simply retried by the Job (the
transcript makes the retry continue where the dead pod stopped, without re-running a tool).

Jobs run in `LESTRADE_JOB_NAMESPACE` (by default the operator's namespace, whose service
account has the operator's rights). When that is the resource's own namespace the Job is owned
by it; otherwise (owner references cannot cross namespaces) the operator deletes the Job when
the resource goes away.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from lestrade.kube import api_path, is_conflict, is_not_found, resource_path
from lestrade.operator.base.engine import Engine
from lestrade.operator.base.recorder import EventRecorder
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.runs.attempt import Outcome, fail, writer_for
from lestrade.operator.status.projection import projection_for
from lestrade.resources.common import FINISHED_PHASES, Phase
from lestrade.resources.keys import RUN_ANNOTATION, RUN_UID_LABEL
from lestrade.runs.views import ConversationView, ObjectRef, RunView, view_of

__all__ = [
    "RUN_UID_LABEL",
    "RUN_ANNOTATION",
    "JobRounds",
    "job_name",
    "job_manifest",
    "job_finished",
]

logger = logging.getLogger(__name__)

CONTAINER_NAME = "run"


def job_name(ref: ObjectRef, generation: int) -> str:
    """One Job per spec generation (a new generation = new decisions = the next round)."""
    base = ref.name[:40].rstrip("-.") or ref.short_name
    if not base[0].isalnum():
        base = f"{ref.short_name}-{base}"
    digest = hashlib.sha256(ref.uid.encode()).hexdigest()[:6]
    return f"{base}-{digest}-{generation}".lower()


def job_manifest(settings: OperatorSettings, ref: ObjectRef, generation: int, seconds_left: float) -> dict[str, Any]:
    """The Job that runs one round (an attempt) of the resource."""
    pod_spec: dict[str, Any] = copy.deepcopy(settings.jobs.pod_template.get("spec", settings.jobs.pod_template))
    containers = pod_spec.setdefault("containers", [])
    if not containers:
        containers.append({"name": CONTAINER_NAME})
    container = containers[0]
    container.setdefault("name", CONTAINER_NAME)
    if settings.jobs.image:
        container["image"] = settings.jobs.image
    container["command"] = [
        "python",
        "-m",
        "lestrade.operator.job",
        "--kind",
        ref.kind,
        "--namespace",
        ref.namespace,
        "--name",
        ref.name,
    ]
    env = [e for e in container.get("env", []) if e.get("name") not in settings.jobs.env]
    env += [{"name": k, "value": v} for k, v in sorted(settings.jobs.env.items())]
    if not any(e.get("name") == "POD_NAME" for e in env):
        env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    container["env"] = env
    pod_spec["restartPolicy"] = "Never"
    if settings.jobs.service_account:
        pod_spec["serviceAccountName"] = settings.jobs.service_account
    labels = {
        RUN_UID_LABEL: ref.uid,
        "app.kubernetes.io/name": "lestrade",
        "app.kubernetes.io/component": "run-job",
        "app.kubernetes.io/managed-by": "lestrade-operator",
    }
    metadata: dict[str, Any] = {
        "name": job_name(ref, generation),
        "namespace": settings.jobs.namespace,
        "labels": labels,
        "annotations": {RUN_ANNOTATION: f"{ref.namespace}/{ref.name}"},
    }
    if settings.jobs.namespace == ref.namespace:
        metadata["ownerReferences"] = [{**ref.owner, "controller": True, "blockOwnerDeletion": False}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": max(1, math.ceil(seconds_left) + 30),
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def job_finished(job: dict[str, Any]) -> tuple[bool, str, str]:
    """(finished, reason, message) from a Job's conditions (reason "Complete" on success)."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return True, "Complete", cond.get("message") or ""
        if cond.get("type") == "Failed":
            return True, cond.get("reason") or "Failed", cond.get("message") or ""
    return False, "", ""


def round_over(before: RunView, now: RunView) -> bool:
    """Whether the round that started at `before` is over according to `now`: it paused for
    new decisions, or its unit of work (the run, or the Conversation's turn) ended."""
    if now.phase == Phase.AWAITING_APPROVAL and now.split_decisions()[1]:
        return True
    if isinstance(before, ConversationView) and isinstance(now, ConversationView):
        return now.current_turn != before.current_turn
    return now.phase in FINISHED_PHASES


class JobRounds:
    """Starts (or re-attaches to) a round's Job and waits until the round is over."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def _jobs_path(self) -> str:
        return api_path("batch/v1", "jobs", self.engine.settings.jobs.namespace)

    async def _jobs_of(self, ref: ObjectRef) -> list[dict[str, Any]]:
        found = await self.engine.kube.get(self._jobs_path, labelSelector=f"{RUN_UID_LABEL}={ref.uid}")
        return list(found.get("items") or [])

    async def _delete(self, name: str) -> None:
        try:
            await self.engine.kube.delete(f"{self._jobs_path}/{name}", propagationPolicy="Background")
        except Exception as exc:
            if not is_not_found(exc):
                raise

    async def delete_all(self, ref: ObjectRef) -> None:
        """Deletes every Job of the resource (it was deleted)."""
        try:
            for job in await self._jobs_of(ref):
                await self._delete(job["metadata"]["name"])
        except Exception as exc:
            logger.warning("could not delete the Jobs of %s/%s: %s", ref.namespace, ref.name, exc)

    async def run_round(
        self,
        view: RunView,
        body: Mapping[str, Any],
        feed: asyncio.Event,
        recorder: EventRecorder,
    ) -> tuple[Outcome, dict[str, Any]]:
        """One Job per spec generation: a new round (after decisions, or a new turn) is a new
        generation, and an operator restarted mid-round finds the round's Job by its name. The
        round is over when the resource finished or paused (the Job's pod wrote that), or when
        the Job ended without either (then the run failed)."""
        settings, kube, ref = self.engine.settings, self.engine.kube, view.ref
        generation = int(ref.generation or 1)
        name = job_name(ref, generation)
        for job in await self._jobs_of(ref):
            if job["metadata"]["name"] != name and not job_finished(job)[0]:
                await self._delete(job["metadata"]["name"])  # a stale round's leftover
        path = f"{self._jobs_path}/{name}"
        try:
            job = await kube.get(path)
        except Exception as exc:
            if not is_not_found(exc):
                raise
            deadline = view.deadline(settings.runs.default_timeout)
            left = (deadline - time.time()) if deadline else view.timeout(settings.runs.default_timeout)
            try:
                job = await kube.create(self._jobs_path, job_manifest(settings, ref, generation, left))
                recorder.post("JobCreated", f"running in Job {settings.jobs.namespace}/{name}")
            except Exception as exc2:
                if not is_conflict(exc2):
                    raise
                job = await kube.get(path)
        while True:
            feed.clear()
            live = view_of(copy.deepcopy(dict(body)))
            if live.resource_version >= view.resource_version and round_over(view, live):
                return _outcome(live), dict(live.body)
            finished, reason, message = job_finished(job)
            if finished:
                break
            await _wait(feed, time.time() + 60)
            try:
                job = await kube.get(path)
            except Exception as exc:
                if not is_not_found(exc):
                    raise
                reason, message = "Deleted", "the Job was deleted"
                break
        # The Job ended; its last status write may still be on its way to the watch.
        fresh = view_of(await kube.get(resource_path(ref.plural, ref.namespace, ref.name)))
        if round_over(view, fresh):
            return _outcome(fresh), dict(fresh.body)
        writer = writer_for(self.engine, fresh)
        timeout = fresh.timeout(settings.runs.default_timeout)
        if reason == "DeadlineExceeded":
            reason, text = "Timeout", f"the run did not finish within its timeout ({timeout:g}s)"
        else:
            reason, text = (
                "JobFailed",
                (
                    f"Job {settings.jobs.namespace}/{name} ended ({reason}) without finishing the "
                    f"round: {message or 'see its pod logs'}"
                ),
            )
        await fail(projection_for(writer, fresh), recorder, reason, text)
        return Outcome.FAILED, writer.last_object or dict(fresh.body)


def _outcome(view: RunView) -> Outcome:
    if view.phase == Phase.AWAITING_APPROVAL:
        return Outcome.AWAITING_APPROVAL
    return Outcome.FAILED if view.phase == Phase.FAILED else Outcome.DONE


async def _wait(event: asyncio.Event, deadline: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), max(0.0, deadline - time.time()))
    except TimeoutError:
        pass
