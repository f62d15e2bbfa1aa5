"""ScheduledInvestigations: a schedule firing every few seconds, Forbid, missed times after a
restart and the starting deadline, bad schedules refused, and the daily example applied."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from opkit import events_for, wait_until

from lestrade.localcluster.build import binary_path
from lestrade.modelserver import Scenario, Step
from lestrade.resources.rest import MERGE_PATCH, request_json

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scheduled.yaml"
BASE = "/apis/lestrade.dev/v1alpha1/namespaces/{ns}/scheduledinvestigations"
ANSWER = "# Healthy\nyes\n\n# Findings\nnone\n\n# Actions\nnone"


def sinv(name: str, schedule: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lestrade.dev/v1alpha1",
        "kind": "ScheduledInvestigation",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "investigation": {"title": "Is the cluster healthy?", "sections": {"Healthy": "yes or no"}},
            **spec,
        },
    }


def create(api_client: k8s.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return request_json(api_client, "POST", BASE.format(ns=namespace), body)


def get(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return request_json(api_client, "GET", f"{BASE.format(ns=namespace)}/{name}")


def children(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    items = k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "lestrade.dev", "v1alpha1", namespace, "investigations", label_selector=f"lestrade.dev/scheduled-by={name}"
    )["items"]
    return {i["metadata"]["name"]: i for i in items}


def reasons(api_client: k8s.ApiClient, namespace: str, name: str, reason: str) -> list[Any]:
    return [e for e in events_for(api_client, namespace, name) if e.reason == reason]


def test_a_schedule_fires_every_few_seconds_and_keeps_its_history(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER)]))
    start_operator(scenario_name, triggers_schedule_recheck=0.5)
    create(api_client, namespace, sinv("tick", "* * * * * */2", successfulHistoryLimit=2))
    wait_until("four scheduled runs", lambda: len(reasons(api_client, namespace, "tick", "Scheduled")) >= 4, 90)
    created = [e.message.split()[2] for e in reasons(api_client, namespace, "tick", "Scheduled")]
    assert len(set(created)) == len(created)  # never the same time twice
    assert all(int(n.rsplit("-", 1)[1]) % 2 == 0 for n in created)  # named after their time
    # history: at most two succeeded runs stay, and the schedule reports its runs
    wait_until(
        "history trimmed",
        lambda: (
            sum(
                1
                for c in children(api_client, namespace, "tick").values()
                if (c.get("status") or {}).get("phase") == "Succeeded"
            )
            <= 2
            and get(api_client, namespace, "tick")["status"].get("lastSuccessfulTime")
        ),
        60,
    )
    some = next(iter(children(api_client, namespace, "tick").values()))
    assert some["metadata"]["ownerReferences"][0]["kind"] == "ScheduledInvestigation"
    assert some["spec"]["sections"] == {"Healthy": "yes or no"}
    status = get(api_client, namespace, "tick")["status"]
    # it keeps firing meanwhile: the last run is one the schedule announced by now
    announced = [e.message.split()[2] for e in reasons(api_client, namespace, "tick", "Scheduled")]
    assert status["lastInvestigation"] in announced and status["nextScheduleTime"]


def test_forbid_skips_while_the_previous_run_is_unfinished(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER, latency_ms=120_000)]))
    start_operator(scenario_name, triggers_schedule_recheck=0.5)
    create(api_client, namespace, sinv("slow", "* * * * * */2", concurrencyPolicy="Forbid"))
    wait_until("two skipped times", lambda: len(reasons(api_client, namespace, "slow", "Skipped")) >= 2, 60)
    runs = children(api_client, namespace, "slow")
    assert len(runs) == 1, sorted(runs)
    assert get(api_client, namespace, "slow")["status"]["active"] == list(runs)


def test_after_an_outage_only_the_latest_missed_time_runs(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER)]))
    create(api_client, namespace, sinv("minutely", "* * * * *", startingDeadlineSeconds=3600))
    create(api_client, namespace, sinv("yearly", "0 0 1 1 *", startingDeadlineSeconds=60))
    # As if the operator had been down: the last handled times are long ago.
    ten_minutes_ago = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name, last in (("minutely", ten_minutes_ago), ("yearly", "2024-06-01T00:00:00Z")):
        request_json(
            api_client,
            "PATCH",
            f"{BASE.format(ns=namespace)}/{name}/status",
            {"status": {"lastScheduleTime": last}},
            content_type=MERGE_PATCH,
        )
    start_operator(scenario_name, triggers_schedule_recheck=0.5)
    wait_until(
        "the missed minute started",
        lambda: (
            get(api_client, namespace, "minutely")["status"].get("lastScheduleTime", ten_minutes_ago) != ten_minutes_ago
        ),
        60,
    )
    last = get(api_client, namespace, "minutely")["status"]["lastScheduleTime"]
    runs = children(api_client, namespace, "minutely")
    stamp = int(datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp())
    assert f"minutely-{stamp}" in runs
    assert len(runs) <= 2, sorted(runs)  # not ten: one, or two if a minute turned meanwhile
    # The yearly run is far past its starting deadline: skipped, with a Warning.
    wait_until(
        "yearly handled",
        lambda: (
            get(api_client, namespace, "yearly")["status"].get("lastScheduleTime")
            == f"{datetime.now(UTC).year}-01-01T00:00:00Z"
        ),
        60,
    )
    assert children(api_client, namespace, "yearly") == {}
    (missed,) = reasons(api_client, namespace, "yearly", "MissedSchedule")
    assert missed.type == "Warning" and "past startingDeadlineSeconds (60)" in missed.message


def test_bad_schedules_are_refused_or_reported(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    for body, expected in (
        (sinv("words", "every day at eight"), "spec.schedule: Invalid value"),
        (sinv("x" * 53, "@daily"), "metadata.name: at most 52 characters"),
        (
            sinv("policy", "@daily", concurrencyPolicy="Sometimes"),
            'spec.concurrencyPolicy: Unsupported value: "Sometimes"',
        ),
    ):
        with pytest.raises(ApiException) as info:
            create(api_client, namespace, body)
        assert info.value.status == 422 and expected in json.loads(info.value.body)["message"]
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER)]))
    start_operator(scenario_name, triggers_schedule_recheck=0.5)
    create(api_client, namespace, sinv("zone", "@daily", timeZone="Mars/Olympus_Mons"))
    create(api_client, namespace, sinv("cron", "61 * * * *"))

    def ready(name: str) -> dict[str, Any] | None:
        conds = (get(api_client, namespace, name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Ready"), None)

    wait_until("zone reported", lambda: ready("zone"), 60)
    assert (ready("zone")["status"], ready("zone")["reason"]) == ("False", "InvalidSchedule")
    assert "spec.timeZone: unknown time zone 'Mars/Olympus_Mons'" in ready("zone")["message"]
    wait_until("cron reported", lambda: ready("cron"), 60)
    assert "spec.schedule: not a valid cron schedule" in ready("cron")["message"]


def test_the_daily_example_applies_without_drift_and_is_scheduled(
    cluster: Any,
    api_client: k8s.ApiClient,
    namespace: str,
    model_server: Any,
    scenario_name: str,
    start_operator: Any,
) -> None:
    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary_path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    applied = kubectl("apply", "--server-side", "-n", namespace, "-f", str(EXAMPLE))
    assert applied.returncode == 0, applied.stderr
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER)]))
    start_operator(scenario_name, triggers_schedule_recheck=0.5)
    wait_until(
        "next time",
        lambda: (get(api_client, namespace, "daily-health-check").get("status") or {}).get("nextScheduleTime"),
        60,
    )
    status = get(api_client, namespace, "daily-health-check")["status"]
    berlin = ZoneInfo("Europe/Berlin")
    expected = croniter("0 8 * * *", datetime.now(berlin)).get_next(datetime).astimezone(UTC)
    assert status["nextScheduleTime"] == expected.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert children(api_client, namespace, "daily-health-check") == {}  # created after 8:00: nothing due
    again = kubectl("apply", "--server-side", "-n", namespace, "-f", str(EXAMPLE))
    assert again.returncode == 0, again.stderr
    assert get(api_client, namespace, "daily-health-check")["metadata"]["generation"] == 1
    diff = kubectl("diff", "--server-side", "-n", namespace, "-f", str(EXAMPLE))
    assert diff.returncode == 0, diff.stdout + diff.stderr


def test_replace_deletes_the_unfinished_run_and_suspend_stops_new_ones(
    api_client: k8s.ApiClient, namespace: str, model_server: Any, scenario_name: str, start_operator: Any
) -> None:
    model_server.add_scenario(Scenario(name=scenario_name, steps=[Step(content=ANSWER, latency_ms=120_000)]))
    start_operator(scenario_name, triggers_schedule_recheck=0.5)
    create(api_client, namespace, sinv("swap", "* * * * * */2", concurrencyPolicy="Replace"))
    wait_until("a run replaced", lambda: reasons(api_client, namespace, "swap", "Replaced"), 60)
    (replaced,) = reasons(api_client, namespace, "swap", "Replaced")[:1]
    gone = replaced.message.split()[2]
    wait_until("the replaced run deleted", lambda: gone not in children(api_client, namespace, "swap"), 60)
    # suspended: the schedule says so, and no new run appears while it is
    request_json(
        api_client, "PATCH", f"{BASE.format(ns=namespace)}/swap", {"spec": {"suspend": True}}, content_type=MERGE_PATCH
    )

    def ready_reason() -> str | None:
        conds = get(api_client, namespace, "swap")["status"].get("conditions") or []
        return next((c["reason"] for c in conds if c["type"] == "Ready"), None)

    wait_until("suspended", lambda: ready_reason() == "Suspended", 60)
    scheduled = len(reasons(api_client, namespace, "swap", "Scheduled"))
    last = get(api_client, namespace, "swap")["status"]["nextScheduleTime"]
    # two more scheduled times pass (nextScheduleTime moves on) without a new run
    wait_until(
        "two times passed",
        lambda: (
            get(api_client, namespace, "swap")["status"]["nextScheduleTime"]
            >= (datetime.fromisoformat(last.replace("Z", "+00:00")) + timedelta(seconds=4)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        ),
        60,
    )
    assert len(reasons(api_client, namespace, "swap", "Scheduled")) == scheduled
