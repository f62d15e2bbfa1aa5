"""Job mode: the operator creates one Job per round; the Job's command runs the round.

KWOK runs no containers, so the test does what the Job's pod would do: it runs the Job's own
command (`python -m lestrade.operator.job ...`) as a local process against the cluster. The
Jobs' pods are kept unschedulable (a node selector no node has) so KWOK does not fake-complete
them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from opkit import (
    EFFECT_LABEL,
    UNSCHEDULABLE,
    count_effects,
    create_inv,
    jobs_of,
    patch_decisions,
    phase_is,
    wait_inv,
    wait_until,
    write_model_list,
)

from lestrade.modelserver import Scenario, Step, ToolCall
from lestrade.operator.runs.jobs import RUN_UID_LABEL


def run_job_command(job: Any, cluster: Any, models: Path, log: Path) -> subprocess.CompletedProcess[bytes]:
    """Runs the Job's container command here, with the Job's environment plus cluster access."""
    container = job.spec.template.spec.containers[0]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    env.update({e.name: e.value for e in container.env or [] if e.value is not None})
    env["LESTRADE_MODEL_LIST"] = str(models)
    assert container.command[:3] == ["python", "-m", "lestrade.operator.job"]
    # The same entrypoint, through the launcher that adds the test tools to the registry.
    argv = [sys.executable, str(Path(__file__).parent / "opkit_launch.py"), "job", *container.command[3:]]
    with open(log, "ab") as out:
        return subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False)


def test_job_mode_runs_each_round_as_a_job(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    tmp_path: Path,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": tag})]
                ),
                Step(content="Fixed."),
            ],
        )
    )
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
    start_operator(
        scenario_name,
        jobs_enabled=True,
        jobs_image="ghcr.io/lestrade/lestrade:test",
        jobs_service_account="lestrade",
        jobs_pod_template=UNSCHEDULABLE,
        jobs_env={"LESTRADE_STATUS_INTERVAL": "0.1"},
    )
    inv = create_inv(api_client, namespace, "in-a-job")
    uid = inv["metadata"]["uid"]

    # (a) The operator creates the right Job and does not run the investigation itself.
    (job,) = wait_until("the first Job", lambda: jobs_of(api_client, namespace, uid), timeout=30)
    spec = job.spec.template.spec
    (container,) = spec.containers
    assert container.image == "ghcr.io/lestrade/lestrade:test"
    assert container.command == [
        "python",
        "-m",
        "lestrade.operator.job",
        "--kind",
        "Investigation",
        "--namespace",
        namespace,
        "--name",
        "in-a-job",
    ]
    assert spec.service_account_name == "lestrade" and spec.restart_policy == "Never"
    assert spec.node_selector == UNSCHEDULABLE["spec"]["nodeSelector"]  # the template is honoured
    assert {"name": "LESTRADE_STATUS_INTERVAL", "value": "0.1"} in [
        {"name": e.name, "value": e.value} for e in container.env
    ]
    assert job.metadata.owner_references[0].uid == uid
    assert job.spec.active_deadline_seconds > 0 and job.spec.backoff_limit >= 1
    assert job.metadata.labels[RUN_UID_LABEL] == uid
    assert (wait_inv(api_client, namespace, "in-a-job", phase_is("Pending"))["status"]).get("startTime") is None
    assert len(model_server.requests(scenario_name)) == 0

    # (b) The Job's command runs the round: here until the approval pause.
    result = run_job_command(job, cluster, models, tmp_path / "job-1.log")
    assert result.returncode == 0, (tmp_path / "job-1.log").read_text()[-3000:]
    paused = wait_inv(api_client, namespace, "in-a-job", phase_is("AwaitingApproval", "Failed"))
    assert paused["status"]["phase"] == "AwaitingApproval"

    # After the decision the operator starts the next round's Job.
    patch_decisions(api_client, namespace, "in-a-job", {"fix-1": {"approved": True}})
    second = wait_until(
        "the second Job",
        lambda: [j for j in jobs_of(api_client, namespace, uid) if j.metadata.name != job.metadata.name],
        timeout=30,
    )
    (job2,) = second
    result = run_job_command(job2, cluster, models, tmp_path / "job-2.log")
    assert result.returncode == 0, (tmp_path / "job-2.log").read_text()[-3000:]
    done = wait_inv(api_client, namespace, "in-a-job", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    assert len(model_server.requests(scenario_name)) == 2


def test_job_mode_runs_each_conversation_turn_as_a_job(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
    tmp_path: Path,
) -> None:
    from convkit import all_answered, ask, create_conv, wait_conv

    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="first answer"),
                Step(content="second answer"),
            ],
        )
    )
    models = write_model_list(tmp_path / "models.yaml", model_server, scenario_name)
    start_operator(
        scenario_name,
        jobs_enabled=True,
        jobs_image="ghcr.io/lestrade/lestrade:test",
        jobs_pod_template=UNSCHEDULABLE,
        jobs_env={"LESTRADE_STATUS_INTERVAL": "0.1"},
    )
    conv = create_conv(api_client, namespace, "chat-in-jobs", "One?")
    uid = conv["metadata"]["uid"]
    (job,) = wait_until("the first turn's Job", lambda: jobs_of(api_client, namespace, uid), timeout=30)
    assert job.spec.template.spec.containers[0].command[3:5] == ["--kind", "Conversation"]
    assert len(model_server.requests(scenario_name)) == 0  # the operator does not run it itself
    result = run_job_command(job, cluster, models, tmp_path / "job-1.log")
    assert result.returncode == 0, (tmp_path / "job-1.log").read_text()[-3000:]
    first = wait_conv(api_client, namespace, "chat-in-jobs", all_answered(1))
    assert first["status"]["turns"][0]["answer"] == "first answer"

    # A new turn is a new generation, so a new Job.
    ask(api_client, namespace, "chat-in-jobs", "Two?")
    second = wait_until(
        "the second turn's Job",
        lambda: [j for j in jobs_of(api_client, namespace, uid) if j.metadata.name != job.metadata.name],
        timeout=30,
    )
    result = run_job_command(second[0], cluster, models, tmp_path / "job-2.log")
    assert result.returncode == 0, (tmp_path / "job-2.log").read_text()[-3000:]
    done = wait_conv(api_client, namespace, "chat-in-jobs", all_answered(2))
    assert [t["answer"] for t in done["status"]["turns"]] == ["first answer", "second answer"]
    assert len(model_server.requests(scenario_name)) == 2
