"""What an agent imports from the broker: only what registered, listed, live clusters publish.

- Forged broker slices (any broker credential can write them) are never imported.
- A cluster whose agent is silent past the grace period has its endpoints withdrawn from every
  import, every observer says so with an Event on its broker `Cluster` (never writing that peer's
  status), and all comes back when it returns.
- A broker outage never triggers that withdrawal.
- A namespace being deleted is waited out quietly.
- ServiceExport condition changes are posted as Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lightkube.models.discovery_v1 import Endpoint, EndpointConditions, EndpointPort
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import (
    AGENT_NAMESPACE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_DISCOVERY_NAME,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    Cluster,
    ClusterEventReason,
    ClusterReason,
    ConditionType,
    ConflictReason,
    ReadyReason,
    ServiceDiscovery,
    broker_object_name,
)
from isthmus.clusterset.brokerinfo import BROKER_TIMEOUT
from isthmus.discovery.agent import Agent
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from isthmus.runtime import REGISTRY
from tests.harness.clusterset import (
    BROKER_NS,
    ClusterSet,
    Member,
    as_dict,
    cond_is,
    service,
)
from tests.harness.polling import eventually, never

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

GRACE = 2.0


class FastGraceClusterSet(ClusterSet):
    """Agents that judge a peer silent after GRACE seconds instead of a minute."""

    async def _start_agent_obj(self, m: Member) -> tuple[Any, asyncio.Task[Any]]:
        agent = await Agent.from_cluster(m.client, m.id, dead_cluster_grace=GRACE)
        return agent, asyncio.create_task(agent.run(), name=f"agent-{m.id}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with FastGraceClusterSet(tmp_path_factory.mktemp("trust"), n=3) as cs:
        yield cs


async def _ns(cs: ClusterSet, ns: str) -> None:
    for i in range(len(cs.clusters)):
        await cs.ensure_namespace(i, ns)


def _ignored(reason: str) -> float:
    return REGISTRY.get_sample_value("isthmus_agent_ignored_slices_total", {"reason": reason}) or 0.0


def _forged_slice(name: str, ns: str, svc: str, cluster: str, ip: str) -> EndpointSlice:
    return EndpointSlice(
        metadata=ObjectMeta(name=name, namespace=BROKER_NS, labels={
            SERVICE_NAME_LABEL: svc, SOURCE_NAMESPACE_LABEL: ns, SOURCE_CLUSTER_LABEL: cluster,
            MANAGED_BY_LABEL: MANAGED_BY_VALUE}),
        addressType="IPv4",
        endpoints=[Endpoint(addresses=[ip], conditions=EndpointConditions(ready=True))],
        ports=[EndpointPort(name="http", port=80, protocol="TCP")],
    )


async def _addresses_in(cs: ClusterSet, i: int, name: str, ns: str) -> set[str]:
    return {a for s in (await cs.imported_slices(i, name, ns)).values()
            for ep in s.get("endpoints") or [] for a in ep.get("addresses") or []}


async def test_forged_broker_slices_are_never_imported(cs: ClusterSet) -> None:
    ns = "t-forged"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, cluster_ip="127.10.7.1"))
    await cs.wait_exported(0, "web", ns)
    await cs.wait_import(2, "web", ns, ["c1"])
    before = {r: _ignored(r) for r in ("unregistered-cluster", "not-in-aggregate", "not-canonical")}
    # A made-up cluster; a registered cluster that does not export the service; a registered, listed
    # cluster's label on a slice that is not the one it publishes.
    await cs.broker_client.create(_forged_slice("evil-1", ns, "web", "evil", "127.66.0.1"))
    await cs.broker_client.create(_forged_slice(broker_object_name("web", ns, "c2"), ns, "web", "c2", "127.66.0.2"))
    await cs.broker_client.create(_forged_slice("web-impostor", ns, "web", "c1", "127.66.0.3"))

    async def only_the_real_one() -> bool:
        for i in range(3):
            assert sorted(await cs.imported_slices(i, "web", ns)) == ["c1"]
            assert await _addresses_in(cs, i, "web", ns) == {"127.10.7.1"}
        return True

    await never(lambda: _any_forged(cs, ns), 2.0, what="a forged endpoint imported")
    await eventually(only_the_real_one)
    for reason, was in before.items():
        assert _ignored(reason) > was, f"ignored slices not counted for {reason}"


async def _any_forged(cs: ClusterSet, ns: str) -> bool:
    return any(a.startswith("127.66.") for i in range(3) for a in await _addresses_in(cs, i, "web", ns))


async def _cluster(cs: ClusterSet, name: str) -> dict[str, Any]:
    return as_dict(await cs.broker_client.get(resource_for(Cluster), name, namespace=BROKER_NS))


def _ready(cluster: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in cluster["status"]["conditions"] if c["type"] == ConditionType.READY)


async def _events_for(cs: ClusterSet, name: str, reason: str) -> list[Any]:
    return [e async for e in cs.broker_client.list(Event, namespace=BROKER_NS)
            if e.involvedObject.name == name and e.reason == reason]


async def test_a_silent_cluster_is_withdrawn_from_every_import_and_restored_when_it_returns(
    cs: ClusterSet,
) -> None:
    ns = "t-silent"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, cluster_ip="127.10.8.1"))
    await cs.export(1, "web", ns, svc=service("web", ns, cluster_ip="127.10.8.2"))
    await cs.wait_aggregate("web", ns, ["c1", "c2"])

    async def sources(i: int, want: list[str]) -> bool:
        got = sorted(await cs.imported_slices(i, "web", ns))
        assert got == want, f"{cs.clusters[i].id} imports {got}, want {want}"
        return True

    for i in range(3):
        await eventually(lambda i=i: sources(i, ["c1", "c2"]))
    await cs.stop_agent(1)
    # c2's agent is gone: after the grace period c1 and c3 stop importing its endpoints.
    for i in (0, 2):
        await eventually(lambda i=i: sources(i, ["c1"]), GRACE + 10)

    async def said_why() -> bool:
        # Each observer says so with an Event; c2's status is c2's alone (a member may write only its
        # own Cluster), so it keeps what c2's agent last wrote.
        withdrawn = await _events_for(cs, "c2", ClusterEventReason.WITHDRAWN)
        assert {e.source.component for e in withdrawn} == {"isthmus-agent/c1", "isthmus-agent/c3"}, withdrawn
        assert all(e.type == "Warning" and "withdrew its endpoints" in e.message for e in withdrawn)
        ready = _ready(await _cluster(cs, "c2"))
        assert (ready["status"], ready["reason"]) == ("True", ClusterReason.AGENT_RUNNING), ready
        return True

    await eventually(said_why)
    # The ServiceImport still lists c2: it exports, it is only unreachable.
    assert sorted(c["cluster"] for c in (await cs.local_import(2, "web", ns) or {})["status"]["clusters"]) == [
        "c1", "c2"]
    await cs.start_agent(1)
    for i in range(3):
        await eventually(lambda i=i: sources(i, ["c1", "c2"]), 15)

    async def back() -> bool:
        ready = _ready(await _cluster(cs, "c2"))
        assert (ready["status"], ready["reason"]) == ("True", ClusterReason.AGENT_RUNNING), ready
        assert await _events_for(cs, "c2", ClusterEventReason.RESTORED)
        return True

    await eventually(back)


async def test_a_restarted_agent_keeps_a_silent_cluster_withdrawn(cs: ClusterSet) -> None:
    """An observer's restart does not re-import a dead cluster: it reads the peer's last heartbeat in the
    broker's clock (managedFields times), so the verdict needs no write to the peer's status."""
    ns = "t-silent-restart"
    await _ns(cs, ns)
    await cs.export(1, "web", ns, svc=service("web", ns, cluster_ip="127.10.9.2"))
    await cs.wait_exported(1, "web", ns)
    await cs.wait_import(2, "web", ns, ["c2"])
    await eventually(lambda: _has_slice(cs, 2, ns, "c2"))
    await cs.stop_agent(1)
    await eventually(lambda: _has_slice(cs, 2, ns, "c2", present=False), GRACE + 10)
    await asyncio.sleep(1.5)  # the broker records write times to the second: be clearly past the grace
    try:
        await cs.restart_agent(2)
        await never(lambda: _has_slice(cs, 2, ns, "c2"), GRACE * 2, what="c2 re-imported after a restart")
    finally:
        await cs.start_agent(1)
    await eventually(lambda: _has_slice(cs, 2, ns, "c2"), 15)


async def _has_slice(cs: ClusterSet, i: int, ns: str, src: str, present: bool = True) -> bool:
    return (src in await cs.imported_slices(i, "web", ns)) == present


async def test_a_broker_outage_withdraws_nothing(tmp_path: Path) -> None:
    async with FastGraceClusterSet(tmp_path, n=2) as cs:
        ns = "t-outage"
        await _ns(cs, ns)
        await cs.export(0, "web", ns, svc=service("web", ns, cluster_ip="127.10.10.1"))
        await cs.export(1, "web", ns, svc=service("web", ns, cluster_ip="127.10.10.2"))
        await cs.wait_aggregate("web", ns, ["c1", "c2"])
        for i in range(2):
            await eventually(lambda i=i: _both(cs, i, ns))
        await cs.stop_broker()
        try:
            await never(lambda: _lost_one(cs, ns), GRACE * 4, what="endpoints withdrawn during a broker outage")
        finally:
            await cs.start_broker()
        # Back: the agents reconnect; nobody is judged silent while the watches catch up.
        await never(lambda: _lost_one(cs, ns), GRACE * 3, what="endpoints withdrawn after a broker outage")
        for name in ("c1", "c2"):
            assert _ready(await _cluster(cs, name))["reason"] != ClusterReason.AGENT_SILENT


async def _both(cs: ClusterSet, i: int, ns: str) -> bool:
    return sorted(await cs.imported_slices(i, "web", ns)) == ["c1", "c2"]


async def _lost_one(cs: ClusterSet, ns: str) -> bool:
    return not all([await _both(cs, i, ns) for i in range(2)])


async def test_a_namespace_being_deleted_is_waited_out_quietly(
    cs: ClusterSet, caplog: pytest.LogCaptureFixture
) -> None:
    ns = "t-terminating"
    await _ns(cs, ns)
    # A finalizer keeps c3's namespace Terminating for as long as the test wants.
    await cs.c(2).create(ConfigMap(metadata=ObjectMeta(name="hold", namespace=ns, finalizers=["test/hold"])))
    await cs.c(2).delete(Namespace, ns)
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    caplog.set_level(logging.INFO)
    caplog.clear()
    await asyncio.sleep(2.0)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors[:3]]
    assert await cs.local_import(2, "web", ns) is None
    # The namespace goes, the user makes it again: the import follows.
    await cs.c(2).patch(ConfigMap, "hold", {"metadata": {"finalizers": None}}, namespace=ns)

    async def gone() -> bool:
        try:
            await cs.c(2).get(Namespace, ns)
        except Exception as e:
            return helpers.is_not_found(e)
        return False

    await eventually(gone, 15)
    await cs.ensure_namespace(2, ns)
    await cs.wait_import(2, "web", ns, ["c1"])


async def test_condition_changes_are_posted_as_events(cs: ClusterSet) -> None:
    ns = "t-events"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]))
    await cs.wait_exported(0, "web", ns)
    await cs.export(1, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 8080}]))

    async def events(i: int, reason: str, type_: str) -> list[Any]:
        return [e async for e in cs.c(i).list(Event, namespace=ns)
                if e.involvedObject.kind == "ServiceExport" and e.involvedObject.name == "web"
                and e.reason == reason and e.type == type_]

    async def warned() -> bool:
        for i in (0, 1):  # every exporter is told, not only the newcomer
            assert await events(i, ConflictReason.PORT, "Warning"), f"no PortConflict event in c{i + 1}"
        return True

    await eventually(warned)
    assert await events(0, "Exported", "Normal")
    await cs.export(1, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]))

    async def cleared() -> bool:
        for i in (0, 1):
            assert await events(i, ConflictReason.NO_CONFLICTS, "Normal"), f"no NoConflicts event in c{i + 1}"
        return True

    await eventually(cleared)


async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A broker that accepts connections and never answers."""
    with contextlib.suppress(Exception):
        await reader.read()
    writer.close()


@pytest.mark.parametrize("broker", ["silent", "refusing"])
async def test_an_agent_that_cannot_reach_the_broker_says_so_within_seconds(tmp_path: Path, broker: str) -> None:
    hole = await asyncio.start_server(_hold, "127.0.0.1", 0)
    port = hole.sockets[0].getsockname()[1]
    if broker == "refusing":
        hole.close()
        await hole.wait_closed()
    async with ClusterSet(tmp_path, n=1, start_agents=False) as cs:
        m = cs.clusters[0]
        sd = await helpers.get(m.client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE)
        unreachable = dataclasses.replace(cs.info, server=f"http://127.0.0.1:{port}", ca_pem=None)
        agent = Agent(cluster=m.client, broker=unreachable.client(timeout=BROKER_TIMEOUT), cluster_id=m.id,
                      discovery=sd.spec)
        task = asyncio.create_task(agent.run())
        try:
            await cs.export(0, "web", "t-nobroker")
            # Within a few seconds, not after a 30 s client timeout; and the reason is never empty.
            want = "ReadTimeout" if broker == "silent" else "ConnectError"

            async def says_why() -> dict[str, Any]:
                # Pending first says "no answer yet"; the error's name follows once the call fails.
                se = await cs.get_export(0, "web", "t-nobroker")
                assert se is not None and cond_is(se, ConditionType.READY, "False", ReadyReason.PENDING)
                found = next(c for c in se["status"]["conditions"] if c["type"] == ConditionType.READY)
                assert want in found["message"], found["message"]
                return dict(found)

            ready = await eventually(says_why, BROKER_TIMEOUT * 3, what=f"Ready=False naming {want}")
            assert f"127.0.0.1:{port}" in ready["message"]
            assert not ready["message"].rstrip().endswith(":"), ready["message"]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await agent.broker.close()
            hole.close()
