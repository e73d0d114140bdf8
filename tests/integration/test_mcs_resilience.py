"""Restarts, an unreachable broker and races: the agent converges, and never duplicates writes or VIPs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from isthmus.api.mcs import CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION, ConditionType, ReadyReason, ValidReason
from tests.harness.clusterset import (
    ClusterSet,
    annotations_of,
    cond_is,
    condition,
    ip_in,
    ips_of,
    service,
    service_export,
)
from tests.harness.polling import eventually, never

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

CONVERGE = 20.0  # after an outage the agent's watches back off before they reconnect


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("resilience"), n=2, enable_clusterset_ip=True) as cs:
        yield cs


async def _ns(cs: ClusterSet, ns: str) -> None:
    for i in range(len(cs.clusters)):
        await cs.ensure_namespace(i, ns)


async def assert_vips_unique(cs: ClusterSet) -> None:
    seen: dict[str, str] = {}
    for si in await cs.broker_imports():
        for ip in ips_of(si):
            assert ip not in seen, f"VIP {ip} on both {seen[ip]} and {si['metadata']['name']}"
            seen[ip] = si["metadata"]["name"]


async def _aggregate_changed(cs: ClusterSet, name: str, ns: str, vip: str) -> str | None:
    agg = await cs.broker_import(name, ns)
    if agg is None:
        return "aggregate deleted"
    if ips_of(agg) != [vip]:
        return f"VIP changed to {ips_of(agg)}"
    if len(await cs.exported_services(name, ns)) != 1:
        return "ExportedService missing"
    return None


async def _withdrawn(cs: ClusterSet, name: str, ns: str) -> bool:
    assert await cs.broker_import(name, ns) is None, "aggregate left"
    assert await cs.exported_services(name, ns) == []
    assert await cs.broker_slices(name, ns) == []
    for i in range(len(cs.clusters)):
        assert await cs.local_import(i, name, ns) is None
        assert await cs.imported_slices(i, name, ns) == {}
    return True


async def test_agent_restart_converges_on_what_changed_while_it_was_down(cs: ClusterSet) -> None:
    ns = "r-restart"
    await _ns(cs, ns)
    await cs.export(0, "kept", ns)
    await cs.export(0, "dropped", ns)
    await cs.wait_exported(0, "kept", ns)
    await cs.wait_exported(0, "dropped", ns)
    vip = await cs.vip_of("kept", ns)
    await cs.stop_agent(0)
    await cs.unexport(0, "dropped", ns)
    await cs.export(0, "added", ns)
    await cs.start_agent(0)
    await cs.wait_exported(0, "added", ns)
    await eventually(lambda: _withdrawn(cs, "dropped", ns), what="export deleted while the agent was down")
    assert await cs.vip_of("kept", ns) == vip
    assert len(await cs.exported_services("kept", ns)) == 1
    await cs.wait_import(1, "added", ns, ["c1"])
    await assert_vips_unique(cs)


async def test_broker_briefly_unreachable_converges(tmp_path: Path) -> None:
    async with ClusterSet(tmp_path, n=2, enable_clusterset_ip=True) as cs:
        await _broker_outage(cs)


async def _broker_outage(cs: ClusterSet) -> None:
    ns = "r-outage"
    await _ns(cs, ns)
    await cs.export(0, "old", ns)
    await cs.wait_exported(0, "old", ns)
    await cs.wait_import(1, "old", ns, ["c1"])
    await cs.stop_broker()
    try:
        await cs.export(0, "during", ns)
        await cs.unexport(0, "old", ns)

        async def ready_during() -> bool:
            se = await cs.get_export(0, "during", ns)
            return cond_is(se, ConditionType.READY, "True")

        await never(ready_during, 1.5, what="Ready=True while the broker is down")
        assert cs.agent_error(0) is None, f"agent crashed: {cs.agent_error(0)!r}"
    finally:
        await cs.start_broker()
    await cs.wait_exported(0, "during", ns, within=CONVERGE)
    await cs.wait_import(1, "during", ns, ["c1"], within=CONVERGE)
    await eventually(lambda: _withdrawn(cs, "old", ns), CONVERGE, what="unexport during the outage")
    # both agents still work normally afterwards
    await cs.export(1, "after", ns)
    await cs.wait_exported(1, "after", ns)
    await cs.wait_import(0, "after", ns, ["c2"])
    await assert_vips_unique(cs)


async def test_export_status_while_the_broker_is_unreachable(tmp_path: Path) -> None:
    """Contract: Ready is "False Pending while it is not yet" in the aggregate; Valid is a local check."""
    async with ClusterSet(tmp_path, n=1) as cs:
        ns = "r-status"
        await cs.ensure_namespace(0, ns)
        await cs.stop_broker()
        try:
            await cs.export(0, "web", ns)
            se = await cs.wait_condition(0, "web", ns, ConditionType.READY, "False")
            assert condition(se, ConditionType.READY)["reason"] in (ReadyReason.PENDING, ReadyReason.FAILED)
            assert cond_is(se, ConditionType.VALID, "True", ValidReason.VALID)
        finally:
            await cs.start_broker()
        await cs.wait_exported(0, "web", ns, within=CONVERGE)


async def test_broker_restart_keeps_state(tmp_path: Path) -> None:
    # Own clusterset: a broker restart must not disturb the other tests' state if it goes wrong.
    async with ClusterSet(tmp_path, n=2, enable_clusterset_ip=True) as cs:
        await _broker_restart(cs)


async def _broker_restart(cs: ClusterSet) -> None:
    ns = "r-brestart"
    await _ns(cs, ns)
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    vip = await cs.vip_of("web", ns)
    await cs.restart_broker()
    # Everything published before the restart is still there.
    agg = await cs.broker_import("web", ns)
    assert agg is not None and ips_of(agg) == [vip]
    assert len(await cs.exported_services("web", ns)) == 1, "ExportedService lost in the broker restart"
    assert len(await cs.broker_slices("web", ns)) == 1, "broker EndpointSlice lost in the broker restart"
    await never(
        lambda: _aggregate_changed(cs, "web", ns, vip), 1.5, what="aggregate changed after broker restart"
    )
    await cs.export(1, "web", ns)
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2"], within=CONVERGE)
    assert ips_of(agg) == [vip]
    await cs.export(1, "new", ns)
    await cs.wait_exported(1, "new", ns, within=CONVERGE)
    await assert_vips_unique(cs)


async def test_two_agents_for_the_same_cluster_only_one_acts(cs: ClusterSet) -> None:
    ns = "r-twoagents"
    await _ns(cs, ns)
    names = [f"svc-{k}" for k in range(6)]
    for n in names:
        await cs.export(0, n, ns, create_export=False)
    second = await cs.start_extra_agent(0, wait=1.0)
    try:
        assert not getattr(second, "ready", False), (
            "the second agent of c1 must not lead while the first does"
        )
        # ...and yet its pod is ready (`isthmus agent`'s /readyz is the Manager's health): a healthy
        # standby, so two replicas roll and drain one at a time (deploy/member/agent).
        await eventually(lambda: asyncio.sleep(0, second.manager.healthy), 10, "the standby healthy")
        await asyncio.gather(*(cs.put(0, service_export(n, ns)) for n in names))
        vips = []
        for n in names:
            await cs.wait_exported(0, n, ns)
            vips.append(await cs.vip_of(n, ns))
            assert len(await cs.exported_services(n, ns)) == 1
        assert len(set(vips)) == len(vips), f"duplicate VIPs: {vips}"
        assert all(ip_in(v, cs.clusters[0].cidr) for v in vips)
        await assert_vips_unique(cs)

        # The leader goes: the standby takes over and keeps exporting.
        await cs.stop_agent(0)
        await cs.wait_agent_ready(second, cs.clusters[0].extra_agents[0][1])
        await cs.export(0, "after-failover", ns)
        await cs.wait_exported(0, "after-failover", ns, within=CONVERGE)
        v = await cs.vip_of("after-failover", ns)
        assert v not in vips
        await assert_vips_unique(cs)
    finally:
        await cs.stop_extra_agents(0)
        if cs.clusters[0].task is None:
            await cs.start_agent(0)


async def test_two_clusters_racing_on_the_same_service(cs: ClusterSet) -> None:
    ns = "r-race"
    await _ns(cs, ns)
    names = [f"race-{k}" for k in range(4)]
    for n in names:
        for i in (0, 1):
            await cs.export(i, n, ns, create_export=False)
    await asyncio.gather(*(cs.put(i, service_export(n, ns)) for n in names for i in (0, 1)))
    for n in names:
        agg = await cs.wait_aggregate(n, ns, ["c1", "c2"])
        vip = await cs.vip_of(n, ns)
        owner = annotations_of(agg)[CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION]
        assert ip_in(vip, cs.clusters[0 if owner == "c1" else 1].cidr)
        for i in (0, 1):
            await cs.wait_condition(i, n, ns, ConditionType.READY, "True")
            imp = await cs.wait_import(i, n, ns, ["c1", "c2"])
            assert ips_of(imp) == [vip]
    await assert_vips_unique(cs)

    # Both unexport at the same moment: nothing may be left behind.
    await asyncio.gather(*(cs.unexport(i, n, ns) for n in names for i in (0, 1)))
    for n in names:
        await eventually(lambda n=n: _withdrawn(cs, n, ns), what=f"{n} withdrawn after both unexported")

    # One unexports while the other exports: the exporter's service must survive.
    for k in range(3):
        n = f"handover-{k}"
        await cs.export(0, n, ns)
        await cs.wait_exported(0, n, ns)
        await cs.export(1, n, ns, create_export=False)
        await asyncio.gather(cs.unexport(0, n, ns), cs.put(1, service_export(n, ns)))
        await cs.wait_aggregate(n, ns, ["c2"])
        await cs.wait_condition(1, n, ns, ConditionType.READY, "True")
        await cs.wait_import(0, n, ns, ["c2"])


async def _versions(cs: ClusterSet, name: str, ns: str) -> dict[str, str]:
    """resourceVersion of every object the agents write for one service."""
    out: dict[str, str] = {}
    assert await cs.broker_import(name, ns) is not None  # derived from the ExportedServices below
    for o in await cs.exported_services(name, ns) + await cs.broker_slices(name, ns):
        out[f"broker/{o['kind']}/{o['metadata']['name']}"] = o["metadata"]["resourceVersion"]
    for m in cs.clusters:
        se = await cs.get_export(m.index, name, ns)
        if se is not None:
            out[f"{m.id}/export"] = se["metadata"]["resourceVersion"]
        imp = await cs.local_import(m.index, name, ns)
        if imp is not None:
            out[f"{m.id}/import"] = imp["metadata"]["resourceVersion"]
        for src, s in (await cs.imported_slices(m.index, name, ns)).items():
            out[f"{m.id}/slice/{src}"] = s["metadata"]["resourceVersion"]
    return out


async def _uids(cs: ClusterSet, name: str, ns: str) -> dict[str, str]:
    out: dict[str, str] = {}
    assert await cs.broker_import(name, ns) is not None  # derived: no object of its own
    for o in await cs.exported_services(name, ns) + await cs.broker_slices(name, ns):
        out[f"broker/{o['kind']}/{o['metadata']['name']}"] = o["metadata"]["uid"]
    for m in cs.clusters:
        imp = await cs.local_import(m.index, name, ns)
        if imp is not None:
            out[f"{m.id}/import"] = imp["metadata"]["uid"]
        for src, s in (await cs.imported_slices(m.index, name, ns)).items():
            out[f"{m.id}/slice/{src}"] = s["metadata"]["uid"]
    return out


async def test_steady_state_has_no_write_churn(cs: ClusterSet) -> None:
    """Agents that disagree (here: conflicting exports) must not keep rewriting each other's objects."""
    ns = "r-churn"
    await _ns(cs, ns)
    await cs.export(
        0,
        "web",
        ns,
        svc=service("web", ns, ports=[{"name": "http", "port": 80}, {"name": "b", "port": 82}]),
        exported_labels={"tier": "web"},
    )
    await cs.wait_exported(0, "web", ns)
    await cs.export(
        1,
        "web",
        ns,
        svc=service("web", ns, ports=[{"name": "http", "port": 8080}, {"name": "a", "port": 81}]),
        exported_labels={"tier": "api"},
        use_clusterset_ip="false",
    )
    await cs.wait_aggregate("web", ns, ["c1", "c2"])
    for i in (0, 1):
        await cs.wait_condition(i, "web", ns, ConditionType.CONFLICT, "True")
    await asyncio.sleep(1.0)  # let the last writes land
    before = await _versions(cs, "web", ns)
    await asyncio.sleep(2.0)
    after = await _versions(cs, "web", ns)
    changed = {
        k: (before.get(k), after.get(k))
        for k in before.keys() | after.keys()
        if before.get(k) != after.get(k)
    }
    assert not changed, f"objects still being rewritten in a steady state: {changed}"


async def test_agent_restarts_do_not_recreate_what_exists(cs: ClusterSet) -> None:
    ns = "r-norecreate"
    await _ns(cs, ns)
    await cs.export(0, "web", ns)
    await cs.export(1, "web", ns)
    await cs.wait_aggregate("web", ns, ["c1", "c2"])
    for i in (0, 1):
        await cs.wait_condition(i, "web", ns, ConditionType.READY, "True")

        async def slice_in(i: int = i) -> bool:
            return sorted(await cs.imported_slices(i, "web", ns)) == ["c1", "c2"]

        await eventually(slice_in)
    vip = await cs.vip_of("web", ns)
    before = await _uids(cs, "web", ns)
    await cs.restart_agent(0)
    await cs.restart_agent(1)
    await asyncio.sleep(1.0)
    assert await _uids(cs, "web", ns) == before, "restarted agents deleted and recreated existing objects"
    assert await cs.vip_of("web", ns) == vip


async def test_rapid_export_unexport_cycles_converge(cs: ClusterSet) -> None:
    ns = "r-cycles"
    await _ns(cs, ns)
    await cs.export(0, "flap", ns, create_export=False)
    for _ in range(5):
        await cs.put(0, service_export("flap", ns))
        await asyncio.sleep(0.05)
        await cs.unexport(0, "flap", ns)
    await eventually(lambda: _withdrawn(cs, "flap", ns), what="withdrawn after the last unexport")
    await cs.put(0, service_export("flap", ns))
    await cs.wait_exported(0, "flap", ns)
    await cs.wait_import(1, "flap", ns, ["c1"])
    assert len(await cs.exported_services("flap", ns)) == 1
    await assert_vips_unique(cs)
