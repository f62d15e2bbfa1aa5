"""Scale-out mode: an Investigation run as a Kubernetes Job.

With `LESTRADE_JOB_MODE=true` the operator does not run the agent itself; it creates a Job
(same image, same engine) whose pod runs

    python -m lestrade.operator.job --namespace NS --name NAME

which is exactly one `run_investigation` call: it resumes from the transcript, writes status
as the operator would, and exits when the run succeeded, failed or paused for approval. So the
load spreads over the cluster's nodes, and a pod that dies is simply retried by the Job (the
transcript makes the retry continue where the dead pod stopped, without re-running a tool).
After an approval the operator starts the next Job for the same Investigation.

Jobs run in `LESTRADE_JOB_NAMESPACE` (by default the operator's namespace, whose service
account has the operator's rights). When that is the Investigation's own namespace the Job is
owned by the Investigation; otherwise (owner references cannot cross namespaces) the operator
deletes the Job when the Investigation goes away.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import logging
import math
import sys
from typing import Any

from .runner import InvestigationRef, ToolsFactory
from .settings import OperatorSettings

__all__ = [
    "INVESTIGATION_UID_LABEL",
    "INVESTIGATION_ANNOTATION",
    "job_name",
    "job_manifest",
    "job_finished",
    "main",
]

logger = logging.getLogger(__name__)

INVESTIGATION_UID_LABEL = "lestrade.dev/investigation-uid"
INVESTIGATION_ANNOTATION = "lestrade.dev/investigation"
CONTAINER_NAME = "investigation"


def job_name(ref: InvestigationRef, generation: int) -> str:
    """One Job per spec generation (a new generation = new decisions = the next round)."""
    base = ref.name[:40].rstrip("-.") or "inv"
    if not base[0].isalnum():
        base = "inv-" + base
    digest = hashlib.sha256(ref.uid.encode()).hexdigest()[:6]
    return f"{base}-{digest}-{generation}".lower()


def job_manifest(
    settings: OperatorSettings, ref: InvestigationRef, generation: int, seconds_left: float
) -> dict[str, Any]:
    """The Job that runs one round of the Investigation."""
    pod_spec: dict[str, Any] = copy.deepcopy(settings.job_pod_template.get("spec", settings.job_pod_template))
    containers = pod_spec.setdefault("containers", [])
    if not containers:
        containers.append({"name": CONTAINER_NAME})
    container = containers[0]
    container.setdefault("name", CONTAINER_NAME)
    if settings.job_image:
        container["image"] = settings.job_image
    container["command"] = [
        "python", "-m", "lestrade.operator.job", "--namespace", ref.namespace, "--name", ref.name,
    ]
    env = [e for e in container.get("env", []) if e.get("name") not in settings.job_env]
    env += [{"name": k, "value": v} for k, v in sorted(settings.job_env.items())]
    if not any(e.get("name") == "POD_NAME" for e in env):
        env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    container["env"] = env
    pod_spec["restartPolicy"] = "Never"
    if settings.job_service_account:
        pod_spec["serviceAccountName"] = settings.job_service_account
    labels = {
        INVESTIGATION_UID_LABEL: ref.uid,
        "app.kubernetes.io/name": "lestrade",
        "app.kubernetes.io/component": "investigation-job",
        "app.kubernetes.io/managed-by": "lestrade-operator",
    }
    metadata: dict[str, Any] = {
        "name": job_name(ref, generation),
        "namespace": settings.job_namespace,
        "labels": labels,
        "annotations": {INVESTIGATION_ANNOTATION: f"{ref.namespace}/{ref.name}"},
    }
    if settings.job_namespace == ref.namespace:
        metadata["ownerReferences"] = [
            {**ref.owner, "controller": True, "blockOwnerDeletion": False}
        ]
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


async def _run(
    namespace: str, name: str, kubeconfig: str | None, tools: ToolsFactory | None = None
) -> int:
    from lestrade.config import load_model_list

    from .context import build_engine
    from .kube import investigation_path, is_not_found
    from .recorder import EventRecorder
    from .runner import pending_decisions, run_investigation

    engine = build_engine(OperatorSettings.from_env(), load_model_list(), kubeconfig, tools=tools)
    try:
        try:
            body = await engine.kube.get(investigation_path(namespace, name))
        except Exception as exc:
            if is_not_found(exc):
                logger.info("investigation %s/%s is gone; nothing to do", namespace, name)
                return 0
            raise
        phase = (body.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return 0
        if pending_decisions(body)[1]:
            logger.info("investigation %s/%s still waits for decisions", namespace, name)
            return 0
        outcome = await run_investigation(engine, body)
        logger.info("investigation %s/%s: %s", namespace, name, outcome.value)
        return 0
    finally:
        await EventRecorder.drain()
        await engine.aclose()


def main(argv: list[str] | None = None, *, tools: ToolsFactory | None = None) -> int:
    """The command line; `tools` replaces the product's tool registry (tests add their own)."""
    parser = argparse.ArgumentParser(
        prog="python -m lestrade.operator.job",
        description="Run one Investigation until it ends or waits for approval (Job mode).",
    )
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--kubeconfig", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(_run(args.namespace, args.name, args.kubeconfig, tools))


if __name__ == "__main__":
    sys.exit(main())
