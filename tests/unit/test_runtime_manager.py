"""The Manager: terms under a Lease with fresh shared informers, hooks in order, readiness, release on stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx2
import msgspec
import pytest
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Service

from isthmus.runtime import manager as manager_module
from isthmus.runtime.manager import LeaderElection, Manager, Term

pytestmark = pytest.mark.timeout(20)

FAST = {"lease_duration": 0.6, "renew_deadline": 0.4, "retry_period": 0.1}


async def until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.01)


def _error(code: int) -> ApiError:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": "x", "reason": "x"}
    return ApiError(request=httpx2.Request("GET", "http://127.0.0.1/"), response=httpx2.Response(code, json=body))


class Leases:
    """get/create/replace of Leases in memory, with resourceVersion checks."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], bytes] = {}
        self.rv = 0

    async def get(self, _res: Any, name: str, *, namespace: str) -> Lease:
        raw = self.data.get((namespace, name))
        if raw is None:
            raise _error(404)
        return msgspec.json.decode(raw, type=Lease)

    def _save(self, obj: Lease) -> Lease:
        self.rv += 1
        obj.metadata.resourceVersion = str(self.rv)
        raw = msgspec.json.encode(obj)
        self.data[(obj.metadata.namespace, obj.metadata.name)] = raw
        return msgspec.json.decode(raw, type=Lease)

    async def create(self, obj: Lease) -> Lease:
        if (obj.metadata.namespace, obj.metadata.name) in self.data:
            raise _error(409)
        return self._save(obj)

    async def replace(self, obj: Lease) -> Lease:
        cur = msgspec.json.decode(self.data[(obj.metadata.namespace, obj.metadata.name)], type=Lease)
        if cur.metadata.resourceVersion != obj.metadata.resourceVersion:
            raise _error(409)
        return self._save(obj)

    def holder(self) -> str | None:
        raw = self.data.get(("default", "lock"))
        return msgspec.json.decode(raw, type=Lease).spec.holderIdentity if raw else None


class FakeInformer:
    def __init__(self, resource: Any, namespace: str | None) -> None:
        self.resource, self.namespace = resource, namespace


class FakeFactory:
    """A SharedInformerFactory that records what the Manager does with it."""

    made: list[FakeFactory] = []
    synced = True

    def __init__(self, client: Any) -> None:
        self.client = client
        self.events: list[str] = []
        self._informers: dict[tuple[Any, str | None], FakeInformer] = {}
        FakeFactory.made.append(self)

    def informer(self, resource: Any, namespace: str | None = None, **_: Any) -> FakeInformer:
        return self._informers.setdefault((resource, namespace), FakeInformer(resource, namespace))

    def start(self) -> None:
        self.events.append("start")

    async def wait_synced(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        if not FakeFactory.synced:
            await asyncio.sleep(timeout or 0)
            return False
        self.events.append("synced")
        return True

    async def stop(self) -> None:
        self.events.append("stop")


@pytest.fixture(autouse=True)
def fake_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeFactory.made = []
    FakeFactory.synced = True
    monkeypatch.setattr(manager_module, "SharedInformerFactory", FakeFactory)


async def test_a_term_wires_shares_informers_and_runs_its_hooks_in_order() -> None:
    order: list[str] = []
    local, broker = object(), object()
    seen: list[tuple[Any, ...]] = []

    async def synced() -> None:
        order.append("synced hook")

    async def stopped() -> None:
        order.append("stopped hook")

    async def work() -> None:
        order.append(f"work (ready: {m.ready})")
        await asyncio.Event().wait()

    async def closed() -> None:
        order.append("exit")

    def wire(term: Term) -> None:
        a, b = term.informer(local, Service), term.informer(local, Service)
        c = term.informer(broker, Service, "ns")
        seen.append((a, b, c))
        term.on_synced(synced)
        term.on_stopped(stopped)
        term.add(work)

    m = Manager("test")
    m.setup(wire)
    m.on_exit(closed)
    assert not m.ready and m.is_leader  # no election: always "leading"
    task = asyncio.create_task(m.run())
    await until(lambda: m.ready)
    a, b, c = seen[0]
    assert a is b and a is not c  # one informer per kind per client
    assert [f.client for f in FakeFactory.made] == [local, broker]
    await until(lambda: len(order) == 2)
    assert order == ["synced hook", "work (ready: True)"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not m.ready and m.term is None
    assert order[2:] == ["stopped hook", "exit"]
    assert all(f.events == ["start", "synced", "stop"] for f in FakeFactory.made)


async def test_a_runnable_that_fails_ends_the_run_with_its_error() -> None:
    async def broken() -> None:
        raise RuntimeError("broke")

    m = Manager("test")
    m.setup(lambda term: term.add(broken))
    with pytest.raises(RuntimeError, match="broke"):
        await m.run()
    assert not m.ready


async def test_the_unsynced_callback_is_called_while_a_client_has_not_synced() -> None:
    FakeFactory.synced = False
    calls: list[float] = []

    async def waiting() -> None:
        calls.append(time.monotonic())
        if len(calls) == 3:
            FakeFactory.synced = True

    client = object()

    def wire(term: Term) -> None:
        term.informers(client, while_unsynced=waiting, every=0.01).informer(ConfigMap)

    m = Manager("test")
    m.setup(wire)
    task = asyncio.create_task(m.run())
    await until(lambda: m.ready)
    assert len(calls) == 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_one_of_two_leads_each_term_is_fresh_and_stop_hands_the_lease_over() -> None:
    leases = Leases()
    terms: dict[str, int] = {"a": 0, "b": 0}
    always: list[str] = []

    def manager(identity: str) -> Manager:
        m = Manager(identity, election=LeaderElection(leases, "lock", identity=identity, **FAST))  # type: ignore[arg-type]

        def wire(term: Term) -> None:
            terms[identity] += 1
            term.informer(leases, Service)

        async def refresh() -> None:
            always.append(identity)
            await asyncio.Event().wait()

        m.setup(wire)
        m.add(refresh, leader_only=False)
        return m

    a, b = manager("a"), manager("b")
    await a.start()
    await until(lambda: a.ready)
    await b.start()
    await asyncio.sleep(0.8)  # past a lease duration: the leader renews, the standby waits
    assert a.ready and not b.ready and leases.holder() == "a"
    assert sorted(always) == ["a", "b"]  # always-on runnables run without the Lease
    assert terms == {"a": 1, "b": 0}
    t0 = time.monotonic()
    await a.stop()
    assert not a.ready
    await until(lambda: b.ready, within=0.5)  # handed back: no wait for expiry
    assert time.monotonic() - t0 < 0.5 and leases.holder() == "b"
    assert terms == {"a": 1, "b": 1}
    assert len(FakeFactory.made) == 2 and FakeFactory.made[0].events[-1] == "stop"
    await b.stop()
    assert leases.holder() is None


async def test_ready_when_adds_the_components_own_condition() -> None:
    programmed = {"yes": False}
    m = Manager("test")
    m.ready_when(lambda: programmed["yes"])
    task = asyncio.create_task(m.run())
    await m.wait_ready()
    assert not m.ready
    programmed["yes"] = True
    assert m.ready
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not m.ready
