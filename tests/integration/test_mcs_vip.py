"""The ClusterSet IP (VIP) lifecycle, every rule of docs/discovery.md "VIP lifecycle"."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from isthmus.api.mcs import (
    CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION,
    DEFAULT_CLUSTERSET_IP_CIDR_RANGE,
    USE_CLUSTERSET_IP_ANNOTATION,
    ConditionType,
    ConflictReason,
)
from tests.harness.clusterset import (
    CLUSTER,
    SD,
    ClusterSet,
    addresses_of,
    annotations_of,
    as_dict,
    clusters_of,
    get_or_none,
    ip_add,
    ip_in,
    ips_of,
    list_dicts,
    reasons,
    service_export,
)
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

C3_CIDR = "243.200.0.0/24"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    # broker: no VIPs by default; c2 turns them on for itself; c3 asks for its own small CIDR.
    async with ClusterSet(
        tmp_path_factory.mktemp("vip"),
        n=3,
        enable_clusterset_ip=False,
        cidrs=[None, None, C3_CIDR],
        cluster_enable=[None, True, None],
    ) as cs:
        yield cs


async def all_vips(cs: ClusterSet) -> dict[str, list[str]]:
    """VIP → names of the broker aggregates holding it."""
    out: dict[str, list[str]] = {}
    for si in await cs.broker_imports():
        for ip in ips_of(si):
            out.setdefault(ip, []).append(si["metadata"]["name"])
    return out


async def assert_vips_unique(cs: ClusterSet) -> None:
    dup = {ip: names for ip, names in (await all_vips(cs)).items() if len(names) > 1}
    assert not dup, f"VIPs allocated twice: {dup}"


async def prepare(cs: ClusterSet, i: int, name: str, ns: str) -> None:
    """Namespace, Service and kube slice, but no ServiceExport yet."""
    await cs.export(i, name, ns, create_export=False)


async def export_vip(cs: ClusterSet, i: int, name: str, ns: str, annotation: str | None = "true") -> str:
    await cs.export(i, name, ns, use_clusterset_ip=annotation)
    await cs.wait_exported(i, name, ns)
    return await cs.vip_of(name, ns)


async def test_join_gives_each_cluster_a_cidr_inside_the_range(cs: ClusterSet) -> None:
    rng = ipaddress.ip_network(DEFAULT_CLUSTERSET_IP_CIDR_RANGE)
    nets = []
    for m in cs.clusters:
        stored = await get_or_none(cs.broker_client, CLUSTER, m.id, cs.info.namespace)
        assert stored is not None
        cidrs = stored["spec"]["clustersetIPCIDR"]
        assert len(cidrs) == 1
        net = ipaddress.ip_network(cidrs[0])
        assert net.subnet_of(rng)  # type: ignore[arg-type]
        nets.append(net)
    assert nets[0].prefixlen == nets[1].prefixlen == 16  # the default block size
    assert str(nets[2]) == C3_CIDR
    for a in range(3):
        for b in range(a + 1, 3):
            assert not nets[a].overlaps(nets[b]), (nets[a], nets[b])
    # The cluster's default: its flag, else the broker's setting at join time.
    want = [False, True, False]
    for m, enabled in zip(cs.clusters, want, strict=True):
        sd = await list_dicts(m.client, SD, "isthmus-system")
        assert len(sd) == 1 and sd[0]["spec"].get("clustersetIPEnabled", False) is enabled, sd


async def test_vip_setting_annotation_over_cluster_setting(cs: ClusterSet) -> None:
    ns = "vip-prec"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    # c1 inherits the broker's "no VIP"
    await cs.export(0, "c1-default", ns)
    agg = await cs.wait_exported(0, "c1-default", ns)
    assert ips_of(agg) == []
    assert annotations_of(agg).get(USE_CLUSTERSET_IP_ANNOTATION) == "false"
    assert CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION not in annotations_of(agg)
    # c2's own setting says VIP
    await cs.export(1, "c2-default", ns)
    await cs.wait_exported(1, "c2-default", ns)
    vip = await cs.vip_of("c2-default", ns)
    assert ip_in(vip, cs.clusters[1].cidr)
    # the annotation beats the cluster setting, both ways
    vip = await export_vip(cs, 0, "c1-annotated", ns, "true")
    assert ip_in(vip, cs.clusters[0].cidr)
    await cs.export(1, "c2-annotated", ns, use_clusterset_ip="false")
    agg = await cs.wait_exported(1, "c2-annotated", ns)
    assert ips_of(agg) == []
    assert annotations_of(agg).get(USE_CLUSTERSET_IP_ANNOTATION) == "false"
    # what each import shows in the third cluster
    for name, has_vip in [
        ("c1-default", False),
        ("c2-default", True),
        ("c1-annotated", True),
        ("c2-annotated", False),
    ]:
        imp = await cs.wait_import(2, name, ns)
        assert bool(ips_of(imp)) is has_vip, (name, imp["spec"])
        assert annotations_of(imp).get(USE_CLUSTERSET_IP_ANNOTATION) == str(has_vip).lower(), name


async def test_broker_setting_applies_when_the_cluster_does_not_choose(tmp_path: Path) -> None:
    async with ClusterSet(tmp_path, n=2, enable_clusterset_ip=True, cluster_enable=[None, False]) as cs2:
        ns = "vip-broker"
        await cs2.ensure_namespace(0, ns)
        await cs2.ensure_namespace(1, ns)
        await cs2.export(0, "from-c1", ns)
        await cs2.wait_exported(0, "from-c1", ns)
        vip = await cs2.vip_of("from-c1", ns)
        assert ip_in(vip, cs2.clusters[0].cidr)
        await cs2.export(1, "from-c2", ns)
        agg = await cs2.wait_exported(1, "from-c2", ns)
        assert ips_of(agg) == [], "c2 joined with VIPs off: its setting beats the broker's"
        # and the annotation still beats both
        await cs2.export(1, "annotated", ns, use_clusterset_ip="true")
        await cs2.wait_exported(1, "annotated", ns)
        assert ip_in(await cs2.vip_of("annotated", ns), cs2.clusters[1].cidr)


async def test_first_exporter_allocates_from_its_cidr_and_sets_allocated_by(cs: ClusterSet) -> None:
    ns = "vip-first"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    vip = await export_vip(cs, 2, "web", ns)
    assert ip_in(vip, C3_CIDR), f"{vip} not from c3's CIDR {C3_CIDR}"
    agg = await cs.broker_import("web", ns)
    assert annotations_of(agg)[CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION] == "c3"
    assert annotations_of(agg)[USE_CLUSTERSET_IP_ANNOTATION] == "true"
    # Later exporters never allocate: the VIP and its allocator stay.
    await cs.export(0, "web", ns, use_clusterset_ip="true")
    await cs.export(1, "web", ns)
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2", "c3"])
    assert ips_of(agg) == [vip]
    assert annotations_of(agg)[CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION] == "c3"
    for i in range(3):
        imp = await cs.wait_import(i, "web", ns, ["c1", "c2", "c3"])
        assert ips_of(imp) == [vip]
        assert annotations_of(imp).get(CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION) == "c3"
        assert annotations_of(imp).get(USE_CLUSTERSET_IP_ANNOTATION) == "true"
    await assert_vips_unique(cs)
    # Every cluster's slice carries pod IPs since the service has a VIP.
    slices = await eventually(lambda: _three_slices(cs, "web", ns))
    for s in slices.values():
        assert addresses_of(s) == ["127.20.0.1"], s


async def _three_slices(cs: ClusterSet, name: str, ns: str) -> dict[str, Any] | None:
    """c3's MCS slices once those of the other two exporters are there (its own may be too)."""
    got = await cs.imported_slices(2, name, ns)
    if not {"c1", "c2"} <= set(got):
        return None
    return got


async def test_simultaneous_exports_allocate_exactly_once_and_the_loser_frees_its_reservation(
    cs: ClusterSet,
) -> None:
    ns = "vip-race"
    names = [f"race-{k}" for k in range(5)]
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    for i in (0, 1):
        for name in names:
            await prepare(cs, i, name, ns)
    await asyncio.gather(*(cs.put(i, service_export(n, ns, "true")) for n in names for i in (0, 1)))
    won: dict[int, set[str]] = {0: set(), 1: set()}
    for name in names:
        agg = await cs.wait_aggregate(name, ns, ["c1", "c2"])
        vip = await cs.vip_of(name, ns)
        owner = annotations_of(agg).get(CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION)
        assert owner in ("c1", "c2"), annotations_of(agg)
        idx = 0 if owner == "c1" else 1
        assert ip_in(vip, cs.clusters[idx].cidr), f"{name}: {vip} not in {owner}'s CIDR"
        won[idx].add(vip)
        for i in range(3):
            imp = await cs.wait_import(i, name, ns, ["c1", "c2"])
            assert ips_of(imp) == [vip], f"{name} in {cs.clusters[i].id}: {ips_of(imp)} != {vip}"
        for i in (0, 1):
            await cs.wait_condition(i, name, ns, ConditionType.READY, "True")
    await assert_vips_unique(cs)
    # Nothing leaked: each racing cluster's allocator holds exactly the VIPs of its CIDR in use.

    async def no_leak() -> bool:
        vips = await all_vips(cs)
        for i in (0, 1):
            allocator = cs.clusters[i].agent.allocator
            in_use = {ip for ip in vips if ip_in(ip, cs.clusters[i].cidr)}
            assert all(allocator.in_use(ip) for ip in in_use), f"{cs.clusters[i].id}: {allocator}"
            assert allocator.used == len(in_use), (
                f"{cs.clusters[i].id}: {allocator.used} addresses held but {len(in_use)} VIPs in use: "
                f"a lost race leaked a reservation (won {sorted(won[i])})"
            )
        return True

    await eventually(no_leak, what="no leaked VIP reservation")


async def test_vip_freed_only_when_the_aggregate_goes_by_the_owning_cluster(cs: ClusterSet) -> None:
    ns = "vip-free"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    v = await export_vip(cs, 0, "shared", ns)
    assert ip_in(v, cs.clusters[0].cidr)
    await cs.export(1, "shared", ns, use_clusterset_ip="true")
    await cs.wait_aggregate("shared", ns, ["c1", "c2"])
    # The allocating cluster unexports: the aggregate lives on, VIP and allocated-by unchanged.
    await cs.unexport(0, "shared", ns)
    agg = await cs.wait_aggregate("shared", ns, ["c2"])
    assert ips_of(agg) == [v]
    assert annotations_of(agg)[CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION] == "c1"
    for i in range(3):
        imp = await cs.wait_import(i, "shared", ns, ["c2"])
        assert ips_of(imp) == [v]
    # ... and c1 still counts it as used.
    t = await export_vip(cs, 0, "other", ns)
    assert t != v
    # The last exporter goes: the aggregate goes and c1 (whose CIDR holds v) frees it.
    await cs.unexport(1, "shared", ns)
    await eventually(lambda: _gone(cs, "shared", ns), what="aggregate deleted")
    # Another cluster may still import `shared` with v for a while: v is not handed out again at
    # once, the next address after the last allocated one is.
    u = await export_vip(cs, 0, "next", ns)
    assert u != v, f"the just-freed VIP {v} was reused at once"
    assert u == ip_add(t, 1), f"got {u}, expected the address after the last allocated one ({t})"
    await assert_vips_unique(cs)


async def _gone(cs: ClusterSet, name: str, ns: str) -> bool:
    return await cs.broker_import(name, ns) is None


async def test_vip_allocator_rebuilt_from_service_imports_on_agent_start(cs: ClusterSet) -> None:
    ns = "vip-rebuild"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    a = await export_vip(cs, 1, "before", ns, annotation=None)  # c2's own setting: VIP
    await cs.restart_agent(1)
    b = await export_vip(cs, 1, "after", ns, annotation=None)
    assert b != a
    vips = await all_vips(cs)
    used = {ip for ip in vips if ip_in(ip, cs.clusters[1].cidr)} - {b}
    assert a in used
    await assert_vips_unique(cs)
    # the first service still has its VIP
    assert await cs.vip_of("before", ns) == a


async def test_agent_restart_does_not_hand_out_a_just_freed_vip_again(cs: ClusterSet) -> None:
    """The rebuilt allocator resumes after the highest VIP in use, not at the lowest free one."""
    ns = "vip-churn-restart"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    x = await export_vip(cs, 1, "x", ns, annotation=None)  # c2's own setting: VIP
    y = await export_vip(cs, 1, "y", ns, annotation=None)
    await cs.unexport(1, "x", ns)
    await eventually(lambda: _gone(cs, "x", ns), what="aggregate deleted")
    await cs.restart_agent(1)
    z = await export_vip(cs, 1, "z", ns, annotation=None)
    assert z != x, f"the just-freed VIP {x} was handed out again after the restart"
    assert z == ip_add(y, 1), f"got {z}, expected the address after the highest VIP in use ({y})"
    await assert_vips_unique(cs)


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
async def test_agent_restart_mid_export_allocates_no_duplicate_vip(cs: ClusterSet, delay: float) -> None:
    ns = "vip-midexport"
    name = f"mid-{int(delay * 1000)}"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    await prepare(cs, 1, name, ns)
    await cs.put(1, service_export(name, ns))
    await asyncio.sleep(delay)
    await cs.restart_agent(1)
    await cs.wait_exported(1, name, ns)
    vip = await cs.vip_of(name, ns)
    assert ip_in(vip, cs.clusters[1].cidr)
    assert len(await cs.exported_services(name, ns)) == 1
    await assert_vips_unique(cs)
    # the next allocation after the restart does not collide either
    nxt = await export_vip(cs, 1, f"{name}-next", ns, annotation=None)
    assert nxt != vip
    await assert_vips_unique(cs)


async def test_vip_unchanged_when_the_allocating_cluster_leaves(tmp_path: Path) -> None:
    cidrs = ["243.1.0.0/16", "243.2.0.0/16"]
    async with ClusterSet(tmp_path, n=2, cidrs=cidrs) as cs2:
        ns = "vip-leave"
        for i in range(2):
            await cs2.ensure_namespace(i, ns)
        v = await export_vip(cs2, 1, "web", ns)
        assert ip_in(v, cidrs[1])
        await cs2.export(0, "web", ns, use_clusterset_ip="true")
        await cs2.wait_aggregate("web", ns, ["c1", "c2"])
        await cs2.leave(1)
        agg = await cs2.wait_aggregate("web", ns, ["c1"])
        assert ips_of(agg) == [v], "the VIP must not change when the allocating cluster leaves"
        assert annotations_of(agg)[CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION] == "c2"
        imp = await cs2.wait_import(0, "web", ns, ["c1"])
        assert ips_of(imp) == [v]

        # A new cluster gets the departed cluster's CIDR: it must treat v as taken.
        m = await cs2.add_cluster("c4", cidr=cidrs[1])
        assert m.cidr == cidrs[1]
        await cs2.ensure_namespace(m.index, ns)
        imp4 = await cs2.wait_import(m.index, "web", ns, ["c1"])
        assert ips_of(imp4) == [v]
        w = await export_vip(cs2, m.index, "new", ns)
        assert ip_in(w, cidrs[1]) and w != v, f"c4 reallocated {w}, in use by web"
        assert as_dict(await cs2.broker_import("web", ns))["spec"]["ips"] == [v]
        assert clusters_of(await cs2.broker_import("new", ns)) == ["c4"]


async def test_vip_exhaustion_is_ready_false_failed_and_retried_once_a_vip_frees(tmp_path: Path) -> None:
    # A /30 has two usable addresses.
    async with ClusterSet(tmp_path, n=1, cidrs=["243.9.9.0/30"]) as cs1:
        ns = "vip-full"
        await cs1.ensure_namespace(0, ns)
        a = await export_vip(cs1, 0, "a", ns)
        b = await export_vip(cs1, 0, "b", ns)
        assert a != b
        await cs1.export(0, "c", ns, use_clusterset_ip="true")
        se = await cs1.wait_condition(0, "c", ns, ConditionType.READY, "False", "Failed")
        msg = se and next(c for c in se["status"]["conditions"] if c["type"] == "Ready")["message"]
        assert "243.9.9.0/30" in msg, f"the message should say which CIDR is full: {msg}"
        assert await cs1.broker_import("c", ns) is None
        # A VIP frees: the failed export is retried and gets it.
        await cs1.unexport(0, "a", ns)
        await cs1.wait_exported(0, "c", ns, within=15)
        assert await cs1.vip_of("c", ns) == a


async def test_changing_the_cluster_setting_and_restarting_only_toggles_the_conflict(cs: ClusterSet) -> None:
    """After a change of the cluster setting and a restart, existing services only toggle the conflict."""
    ns = "vip-flag"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    await cs.export(2, "web", ns)  # c3's setting: no VIP
    agg = await cs.wait_exported(2, "web", ns)
    assert ips_of(agg) == []
    sd_name = (await list_dicts(cs.c(2), SD, "isthmus-system"))[0]["metadata"]["name"]
    await cs.patch(2, SD, sd_name, "isthmus-system", {"spec": {"clustersetIPEnabled": True}})
    try:
        await cs.restart_agent(2)
        se = await cs.wait_condition(2, "web", ns, ConditionType.CONFLICT, "True")
        assert ConflictReason.CLUSTERSET_IP_ENABLEMENT in reasons(se)
        agg = await cs.broker_import("web", ns)
        assert agg is not None and ips_of(agg) == [], "a flag change must not give an existing service a VIP"
        # new exports follow the new setting
        await cs.export(2, "fresh", ns)
        await cs.wait_exported(2, "fresh", ns)
        assert ip_in(await cs.vip_of("fresh", ns), C3_CIDR)
    finally:
        await cs.patch(2, SD, sd_name, "isthmus-system", {"spec": {"clustersetIPEnabled": False}})
        await cs.restart_agent(2)
