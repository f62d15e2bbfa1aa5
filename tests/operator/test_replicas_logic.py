"""The pure parts of shared replicas: claim values (hostile ones too), the preferred owner,
the lease timing rules, and how a replica judges another alive (observer's clock, fresh read).
The apiserver side is in test_op_replicas.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lestrade.kube import ApiException
from lestrade.operator.base.settings import OperatorSettings
from lestrade.operator.replicas.membership import Holder, Membership
from lestrade.operator.replicas.ownership import preferred_owner


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "lease",
        "lease/uid",
        "lease/uid/",
        "lease/uid/x",
        "/uid/1",
        "lease//1",
        "lease/uid/1/extra",
        "lease/uid/-1",
        "a/b/1\n",
    ],
)
def test_malformed_claims_name_nobody(text: str | None) -> None:
    assert Holder.decode(text) is None


def test_a_claim_round_trips() -> None:
    holder = Holder("lestrade-pod-1", "0b1c-uid", 7)
    assert Holder.decode(holder.encode()) == holder


def test_the_preferred_owner_is_stable_and_spreads() -> None:
    leases = ["g-a", "g-b"]
    picks = [preferred_owner(f"uid-{i}", leases) for i in range(400)]
    assert picks == [preferred_owner(f"uid-{i}", list(reversed(leases))) for i in range(400)]
    assert 120 < picks.count("g-a") < 280  # roughly half each
    # A replica leaving moves only its own objects.
    assert all(preferred_owner(f"uid-{i}", ["g-a", "g-b", "g-c"]) in (p, "g-c") for i, p in enumerate(picks))
    assert preferred_owner("uid", []) is None


@pytest.mark.parametrize(
    "env, field",
    [
        ({"LESTRADE_REPLICAS": "both"}, "LESTRADE_REPLICAS"),
        ({"LESTRADE_REPLICAS": "shared", "LESTRADE_JOB_MODE": "true"}, "Job mode"),
        ({"LESTRADE_LEASE_RENEW_DEADLINE": "30"}, "LESTRADE_LEASE_RENEW_DEADLINE"),
        ({"LESTRADE_LEASE_RENEW_INTERVAL": "0"}, "LESTRADE_LEASE_RENEW_INTERVAL"),
    ],
)
def test_bad_replica_settings_are_refused_naming_the_setting(env: dict[str, str], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        OperatorSettings.from_env(env)


def test_replica_settings_from_the_environment() -> None:
    settings = OperatorSettings.from_env(
        {"LESTRADE_REPLICAS": "Shared", "POD_NAME": "lestrade-7d9-x2", "POD_NAMESPACE": "ops"}
    )
    assert (settings.replicas.mode, settings.replicas.name, settings.replicas.lease_namespace) == (
        "shared",
        "lestrade-7d9-x2",
        "ops",
    )
    assert (
        settings.replicas.lease_renew_interval
        < settings.replicas.lease_renew_deadline
        < settings.replicas.lease_duration
    )


class FakeLeases:
    """Just the GETs Membership.alive makes: leases by name, or 404."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.gets = 0

    def put(self, name: str, uid: str, epoch: int, renew: str, duration: int = 10) -> None:
        self.leases[name] = {
            "metadata": {"name": name, "uid": uid, "resourceVersion": "1"},
            "spec": {"renewTime": renew, "leaseTransitions": epoch, "leaseDurationSeconds": duration},
        }

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        self.gets += 1
        name = path.rsplit("/", 1)[1]
        if name not in self.leases:
            raise ApiException(status=404, reason="Not Found")
        return self.leases[name]


def test_another_replica_is_dead_only_after_its_lease_stood_still_for_the_duration() -> None:
    now = [100.0]
    kube = FakeLeases()
    membership = Membership(
        kube,
        namespace="ops",
        group="g",
        replica="me",
        duration=10,  # type: ignore[arg-type]
        renew_deadline=6,
        renew_interval=1,
        clock=lambda: now[0],
    )
    other = Holder("g-b", "uid-b", 0)
    kube.put("g-b", "uid-b", 0, "t1")

    async def judge() -> bool:
        return await membership.alive(other)

    assert asyncio.run(judge())  # first seen now: alive for a whole duration from here
    now[0] += 9.5
    assert asyncio.run(judge())
    now[0] += 1.0  # 10.5 s without a change, read afresh: dead
    assert not asyncio.run(judge())
    kube.put("g-b", "uid-b", 0, "t2")  # it renewed after all: the fresh read sees it
    now[0] += 1.5
    assert asyncio.run(judge())
    kube.put("g-b", "uid-b", 1, "t3")  # a new epoch (it fenced itself): old claims are stale
    now[0] += 1.5
    assert not asyncio.run(judge())
    assert asyncio.run(membership.alive(Holder("g-b", "uid-b", 1)))
    kube.put("g-b", "uid-other", 1, "t3")  # deleted and re-created: stale as well
    now[0] += 1.5
    assert not asyncio.run(membership.alive(Holder("g-b", "uid-b", 1)))
    del kube.leases["g-b"]  # gone (a clean stop)
    now[0] += 1.5
    assert not asyncio.run(membership.alive(Holder("g-b", "uid-other", 1)))


def test_reads_are_reused_for_a_second_at_most() -> None:
    now = [0.0]
    kube = FakeLeases()
    kube.put("g-b", "uid-b", 0, "t1")
    membership = Membership(
        kube,
        namespace="ops",
        group="g",
        replica="me",
        duration=10,  # type: ignore[arg-type]
        renew_deadline=6,
        renew_interval=1,
        clock=lambda: now[0],
    )

    async def many() -> None:
        for _ in range(50):
            assert await membership.alive(Holder("g-b", "uid-b", 0))

    asyncio.run(many())
    assert kube.gets == 1
    now[0] += 1.5
    asyncio.run(many())
    assert kube.gets == 2


def test_a_fenced_replica_is_not_alive_for_itself_and_its_timing_is_checked() -> None:
    membership = Membership(
        object(),
        namespace="ops",
        group="g",
        replica="Me_Pod",
        duration=10,  # type: ignore[arg-type]
        renew_deadline=6,
        renew_interval=1,
    )
    assert membership.name == "g-me-pod"  # a valid object name from any host name
    assert membership.fenced and membership.holder is None
    assert not asyncio.run(membership.alive(Holder("g-me-pod", "u", 0)))
    with pytest.raises(ValueError, match="renew interval < renew deadline < lease duration"):
        Membership(
            object(),
            namespace="ops",
            group="g",
            replica="x",
            duration=5,  # type: ignore[arg-type]
            renew_deadline=6,
            renew_interval=1,
        )
