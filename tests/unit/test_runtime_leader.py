"""Leader election logic against an in-memory Lease store with optimistic concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import msgspec
import pytest
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease

from isthmus.runtime import LeaderElector, LeadershipLost
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(20)

FAST = {"lease_duration": 0.6, "renew_deadline": 0.4, "retry_period": 0.1}


def api_error(code: int) -> ApiError:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "message": "x",
        "reason": "x",
    }
    return ApiError(
        request=httpx2.Request("GET", "http://127.0.0.1/"), response=httpx2.Response(code, json=body)
    )


class LeaseStore:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], bytes] = {}
        self.rv = 0


class FakeClient:
    """get/create/replace of Leases with resourceVersion checks; `down` simulates a partition."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise httpx2.ConnectError("partitioned")

    async def get(self, res: Any, name: str, *, namespace: str) -> Lease:
        self._check()
        raw = self.store.data.get((namespace, name))
        if raw is None:
            raise api_error(404)
        return msgspec.json.decode(raw, type=Lease)

    def _save(self, obj: Lease) -> Lease:
        self.store.rv += 1
        obj.metadata.resourceVersion = str(self.store.rv)
        raw = msgspec.json.encode(obj)
        self.store.data[(obj.metadata.namespace, obj.metadata.name)] = raw
        return msgspec.json.decode(raw, type=Lease)

    async def create(self, obj: Lease) -> Lease:
        self._check()
        if (obj.metadata.namespace, obj.metadata.name) in self.store.data:
            raise api_error(409)
        return self._save(obj)

    async def replace(self, obj: Lease) -> Lease:
        self._check()
        cur = msgspec.json.decode(self.store.data[(obj.metadata.namespace, obj.metadata.name)], type=Lease)
        if cur.metadata.resourceVersion != obj.metadata.resourceVersion:
            raise api_error(409)
        return self._save(obj)

    def holder(self) -> str | None:
        raw = self.store.data.get(("default", "lock"))
        return msgspec.json.decode(raw, type=Lease).spec.holderIdentity if raw else None


def elector(client: FakeClient, ident: str) -> LeaderElector:
    return LeaderElector(client, "lock", "default", identity=ident, **FAST)  # type: ignore[arg-type]


async def test_exactly_one_leads_and_release_hands_over_at_once() -> None:
    store = LeaseStore()
    ca, cb = FakeClient(store), FakeClient(store)
    a, b = elector(ca, "a"), elector(cb, "b")
    leading: list[str] = []

    async def work(name: str) -> None:
        leading.append(name)
        await asyncio.sleep(3600)

    ta = asyncio.create_task(a.run(lambda: work("a")))
    await eventually(lambda: leading == ["a"])
    tb = asyncio.create_task(b.run(lambda: work("b")))
    await asyncio.sleep(1.0)  # well past a lease duration: b must still wait, a renews
    assert leading == ["a"] and a.is_leader and not b.is_leader
    assert b.leader == "a"
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ta.cancel()  # clean shutdown releases the lease
    with pytest.raises(asyncio.CancelledError):
        await ta
    assert ca.holder() is None
    await eventually(lambda: leading == ["a", "b"])
    assert loop.time() - t0 < 0.5  # released: no need to wait for expiry
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


async def test_partitioned_leader_steps_down_before_takeover() -> None:
    store = LeaseStore()
    ca, cb = FakeClient(store), FakeClient(store)
    a, b = elector(ca, "a"), elector(cb, "b")
    loop = asyncio.get_running_loop()
    a_stopped_at: list[float] = []
    b_started_at: list[float] = []

    async def a_work() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            a_stopped_at.append(loop.time())

    async def b_work() -> None:
        b_started_at.append(loop.time())
        await asyncio.sleep(3600)

    ta = asyncio.create_task(a.run(a_work))
    await eventually(lambda: a.is_leader)
    tb = asyncio.create_task(b.run(b_work))
    await asyncio.sleep(0.3)
    t_cut = loop.time()
    ca.down = True  # a can no longer renew
    await eventually(lambda: bool(b_started_at), within=3)
    assert a_stopped_at and a_stopped_at[0] < b_started_at[0]  # never two leaders at once
    # a gives up at its renew deadline, before its Lease can expire (the safety that matters is the
    # ordering above; a loaded machine's scheduling delay is allowed, up to the lease duration)
    assert a_stopped_at[0] - t_cut < FAST["lease_duration"] + 0.2
    # the Lease records whole seconds (ceil(0.6) = 1): b waits that long after a's last renewal
    assert b_started_at[0] - t_cut <= 1.0 + 3 * FAST["retry_period"] + 0.2
    assert not a.is_leader
    # a comes back: it campaigns again but b holds a live lease
    ca.down = False
    await asyncio.sleep(0.5)
    assert b.is_leader and not a.is_leader and cb.holder() == "b"
    for t in (ta, tb):
        t.cancel()
    await asyncio.gather(ta, tb, return_exceptions=True)


async def test_leading_context_raises_leadership_lost() -> None:
    store = LeaseStore()
    c = FakeClient(store)
    e = elector(c, "solo")
    body_cancelled = False
    with pytest.raises(LeadershipLost):
        async with e.leading():
            assert e.is_leader and c.holder() == "solo"
            c.down = True
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                body_cancelled = True
                raise
    assert body_cancelled and not e.is_leader
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_run_returns_and_releases_when_work_ends() -> None:
    store = LeaseStore()
    c = FakeClient(store)
    e = elector(c, "solo")
    stopped: list[bool] = []

    async def work() -> None:
        await asyncio.sleep(0.05)

    async def on_stopped() -> None:
        stopped.append(True)

    await asyncio.wait_for(e.run(work, on_stopped), 5)
    assert stopped == [True] and c.holder() is None and not e.is_leader


async def test_expired_lease_of_dead_holder_is_taken_with_transition() -> None:
    store = LeaseStore()
    dead = FakeClient(store)
    assert await elector(dead, "dead").try_acquire_or_renew()
    c = FakeClient(store)
    e = elector(c, "new")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    async with e.leading():
        waited = loop.time() - t0
        lease = await c.get(Lease, "lock", namespace="default")
    assert 1.0 <= waited <= 1.5  # the record's whole-second duration
    assert lease.spec.leaseTransitions == 1 and lease.spec.holderIdentity == "new"


def test_rejects_inconsistent_durations() -> None:
    with pytest.raises(ValueError):
        LeaderElector(None, "x", lease_duration=5, renew_deadline=6, retry_period=1)  # type: ignore[arg-type]


async def test_last_contact_records_when_the_apiserver_last_answered() -> None:
    """A standby's health: the apiserver answered its last attempt (held or not)."""
    store = LeaseStore()
    ca, cb = FakeClient(store), FakeClient(store)
    a, b = elector(ca, "a"), elector(cb, "b")
    assert b.last_contact is None
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # held by a: not acquired, but answered
    seen = b.last_contact
    assert seen is not None
    cb.down = True
    with pytest.raises(httpx2.ConnectError):
        await b.try_acquire_or_renew()
    assert b.last_contact == seen


async def test_a_standby_polls_at_its_acquire_period(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader renews every retry_period; a standby may ask more often (reads, not writes)."""
    from isthmus.runtime import leader as leader_mod

    store = LeaseStore()
    a = elector(FakeClient(store), "a")
    assert await a.try_acquire_or_renew()
    waits: list[float] = []

    async def record(delay: float) -> None:
        waits.append(delay)
        raise asyncio.CancelledError

    monkeypatch.setattr(leader_mod.asyncio, "sleep", record)
    for period, expected in ((None, FAST["retry_period"]), (0.02, 0.02)):
        b = LeaderElector(FakeClient(store), "lock", "default", identity="b", acquire_period=period, **FAST)  # type: ignore[arg-type]
        waits.clear()
        with pytest.raises(asyncio.CancelledError):
            await b.acquire()
        assert len(waits) == 1 and expected <= waits[0] <= expected * 1.2
