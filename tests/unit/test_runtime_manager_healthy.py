"""A leader-elected Manager's health, what several replicas serve as readiness (`isthmus
controller-manager`): a leader is healthy once its caches synced, a standby while the apiserver answers
its election; `ready` keeps meaning "leading and synced" for the single-replica components."""

from __future__ import annotations

import asyncio
import time

import pytest
from lightkube.resources.core_v1 import Service

from isthmus.cli.app import Together
from isthmus.cli.manager import STANDBY_POLL_SECONDS, Healthy
from isthmus.runtime.manager import LeaderElection, Manager, Term
from tests.unit.test_runtime_manager import (  # noqa: F401 (the autouse fake_factory fixture)
    FAST,
    FakeFactory,
    Leases,
    fake_factory,
    until,
)

pytestmark = pytest.mark.timeout(20)


def elected(leases: Leases, identity: str) -> Manager:
    m = Manager(identity, election=LeaderElection(leases, "lock", identity=identity, **FAST))  # type: ignore[arg-type]

    async def unsynced() -> None:
        pass

    def wire(term: Term) -> None:
        term.informers(leases, while_unsynced=unsynced, every=0.01).informer(Service)

    m.setup(wire)
    return m


async def test_a_standby_is_healthy_while_the_apiserver_answers_its_election() -> None:
    leases = Leases()
    a, b = elected(leases, "a"), elected(leases, "b")
    assert not b.healthy  # never heard from the apiserver: it could not take over
    await a.start()
    await until(lambda: a.ready)
    await b.start()
    await until(lambda: b.elector is not None and b.elector.last_contact is not None)
    assert leases.holder() == "a"
    assert b.healthy and not b.ready and not b.is_leader  # standing by, healthy, not leading
    assert a.healthy and a.ready
    assert b.elector is not None
    # Its last answer older than a Lease duration (the apiserver unreachable): not healthy.
    await b.stop()
    b.elector.last_contact = time.monotonic() - b.elector.lease_duration - 0.1
    assert not b.healthy
    b.elector.last_contact = time.monotonic()
    assert b.healthy
    await a.stop()


async def test_a_leader_is_healthy_only_once_its_caches_synced() -> None:
    FakeFactory.synced = False
    leases = Leases()
    m = elected(leases, "a")
    await m.start()
    await until(lambda: m.is_leader)
    await asyncio.sleep(0.05)
    assert m.elector is not None and m.elector.last_contact is not None
    assert not m.healthy  # leading, in contact, caches not synced: a leader that cannot work yet
    FakeFactory.synced = True
    await until(lambda: m.healthy)
    assert m.ready
    await m.stop()
    assert leases.holder() is None


async def test_without_an_election_healthy_is_ready() -> None:
    m = Manager("alone")
    assert not m.healthy
    task = asyncio.create_task(m.run())
    await until(lambda: m.ready)
    assert m.healthy
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not m.healthy


async def test_two_controller_manager_replicas_are_both_ready_and_the_leader_hands_over_on_stop() -> None:
    """The command's parts are `Healthy(manager)`: both replicas ready (a plain Manager standby would
    not be), and stopping the leader's replica hands its Lease to the other at once."""
    leases = Leases()
    first, second = Together([Healthy(elected(leases, "a"))]), Together([Healthy(elected(leases, "b"))])
    await first.start()
    await until(lambda: first.ready)
    await second.start()
    await until(lambda: second.ready)
    standby = second.parts[0]
    assert isinstance(standby, Healthy)
    assert leases.holder() == "a" and not standby.manager.ready  # ready as a standby, not as a leader
    await first.stop()
    await until(lambda: leases.holder() == "b" and standby.manager.ready, within=1.0)  # not the 0.6 s expiry + renew
    assert second.ready
    await second.stop()
    assert leases.holder() is None


def test_a_controller_manager_standby_reads_its_lease_more_often_than_the_leader_renews() -> None:
    """A Lease handed back at SIGTERM is taken within the standby's poll, not a 2 s retry period; a
    poll never slower than the retry period (the elector's own pace)."""
    m = Manager("lb", election=LeaderElection(Leases(), "lock"))  # type: ignore[arg-type]
    assert m.elector is not None and m.elector.acquire_period is None  # alone: the retry period
    Healthy(m)
    assert m.elector.acquire_period == STANDBY_POLL_SECONDS < m.elector.retry_period
    quick = elected(Leases(), "b")
    Healthy(quick)
    assert quick.elector is not None and quick.elector.acquire_period == FAST["retry_period"]


async def test_the_controller_managers_mcsvc_part_stands_by_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """mcsvc joins first (not ready meanwhile), then is ready as a healthy standby in the controller
    manager, and only while leading when it runs alone (`isthmus mcsvc`, one replica)."""
    from types import SimpleNamespace

    from isthmus.cli.exposure import mcsvc_part
    from isthmus.clusterset import membership
    from isthmus.exposure import member

    leases = Leases()
    made: dict[str, Manager] = {}

    class Member:
        def __init__(self, *, identity: str, **_: object) -> None:
            self.manager = made[identity] = elected(leases, identity)

        @property
        def ready(self) -> bool:
            return self.manager.ready

        async def run(self) -> None:
            await self.manager.run()

    async def joined(_client: object) -> tuple[str, object]:
        return "c1", SimpleNamespace(client=lambda **_: None, namespace="isthmus-broker")

    monkeypatch.setattr(membership, "membership", joined)
    monkeypatch.setattr(member, "MemberController", Member)
    leader, standby, alone = (mcsvc_part(None, None, "a", 1, standby_poll=STANDBY_POLL_SECONDS),
                              mcsvc_part(None, None, "b", 1, standby_poll=STANDBY_POLL_SECONDS),
                              mcsvc_part(None, None, "c", 1))
    assert not leader.ready  # not joined yet
    await leader.start()
    await until(lambda: leader.ready and leases.holder() == "a")
    await standby.start()
    await alone.start()
    await until(lambda: standby.ready)
    await asyncio.sleep(2 * FAST["retry_period"])  # both standbys heard from the apiserver by now
    assert all(m.elector is not None and m.elector.last_contact is not None for m in made.values())
    assert standby.ready and not alone.ready and leases.holder() == "a"
    for part in (alone, standby, leader):
        await part.stop()
