"""Joining and leaving: bad input to join is a clear error that loses nothing, a late joiner imports
what exists, and a cluster that leaves is cleaned off the broker and out of every other cluster."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from isthmus.api.mcs import HEARTBEAT_ANNOTATION, SOURCE_CLUSTER_LABEL, ConditionType, ConflictReason
from isthmus.clusterset import membership as joinmod
from isthmus.clusterset.control import ClustersetError
from tests.harness.clusterset import (
    BROKER_NS,
    CLUSTER,
    SD,
    ClusterSet,
    annotations_of,
    get_or_none,
    ips_of,
    labels_of,
    list_dicts,
    service,
)
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

CIDRS = ["243.1.0.0/16", "243.2.0.0/16"]
NS = "m-apps"
JoinError: type[Exception] = ClustersetError


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("membership"), n=2, cidrs=CIDRS) as cs:
        for i in range(2):
            await cs.ensure_namespace(i, NS)
        await cs.export(0, "web", NS, use_clusterset_ip="true")
        await cs.wait_exported(0, "web", NS)
        await cs.wait_import(1, "web", NS, ["c1"])
        yield cs


async def _snapshot(cs: ClusterSet) -> dict[str, Any]:
    clusters = {
        c["metadata"]["name"]: (c["spec"], c["metadata"]["uid"])
        for c in await list_dicts(cs.broker_client, CLUSTER, BROKER_NS)
    }
    imports = {
        si["metadata"]["name"]: (
            si["spec"],
            annotations_of(si).get("lighthouse.submariner.io/clusterset-ip-allocated-by"),
        )
        for si in await cs.broker_imports()
    }
    sds = [(await list_dicts(m.client, SD, "isthmus-system"))[0]["spec"] for m in cs.clusters]
    return {"clusters": clusters, "imports": imports, "sds": sds}


BAD_JOINS = [
    pytest.param("c9", "not-a-cidr", "not-a-cidr", id="bad-cidr-syntax"),
    pytest.param("c9", "243.9.0.0/33", "243.9.0.0/33", id="bad-cidr-prefix"),
    pytest.param("c9", "243.9.0.1/16", "243.9.0.1/16", id="bad-cidr-host-bits"),
    pytest.param("c9", "10.0.0.0/16", "10.0.0.0/16", id="cidr-outside-range"),
    pytest.param("c9", "243.1.128.0/17", "243.1.0.0/16", id="cidr-overlapping-c1"),
    pytest.param("c9", "243.0.0.0/8", "243.0.0.0/8", id="cidr-overlapping-everyone"),
    pytest.param("c1", "243.7.0.0/16", "c1", id="duplicate-cluster-id"),
    pytest.param("C_9", None, "C_9", id="invalid-cluster-id"),
]


@pytest.mark.parametrize(("cluster_id", "cidr", "mentions"), BAD_JOINS)
async def test_bad_join_is_a_clear_error_and_nothing_is_lost(
    cs: ClusterSet, cluster_id: str, cidr: str | None, mentions: str
) -> None:
    before = await _snapshot(cs)
    name = f"spare-{abs(hash((cluster_id, cidr))) % 10_000}"
    _srv, client = await cs.spare_server(name)
    with pytest.raises(JoinError) as exc:
        await joinmod.join(
            cs.broker_client,
            client,
            cs.info,
            cluster_id=cluster_id,
            enable_clusterset_ip=None,
            clusterset_ip_cidr=cidr,
            force=False,
            member_credentials=cs.member_credentials,
        )
    message = str(exc.value)
    assert mentions in message, f"error should name {mentions!r}: {message}"
    assert "Traceback" not in message and len(message) < 600
    # nothing lost, nothing half-registered
    assert await _snapshot(cs) == before
    assert await get_or_none(cs.broker_client, CLUSTER, "c9", BROKER_NS) is None
    try:
        sds = await list_dicts(client, SD, "isthmus-system")
    except Exception:  # the CRD was never installed there: fine
        sds = []
    assert sds == [], "a failed join must not configure the member cluster"
    # the existing export keeps working
    await cs.wait_condition(0, "web", NS, ConditionType.READY, "True")
    imp = await cs.wait_import(1, "web", NS, ["c1"])
    agg = await cs.broker_import("web", NS)
    assert agg is not None and ips_of(imp) == ips_of(agg) != []


async def test_a_cluster_joining_later_imports_existing_services(cs: ClusterSet) -> None:
    vip = await cs.vip_of("web", NS)
    m = await cs.add_cluster("c9", cidr="243.9.0.0/16")
    assert m.cidr == "243.9.0.0/16"
    await cs.ensure_namespace(m.index, NS)
    imp = await cs.wait_import(m.index, "web", NS, ["c1"])
    assert ips_of(imp) == [vip]

    async def slice_from_c1() -> bool:
        return "c1" in await cs.imported_slices(m.index, "web", NS)

    await eventually(slice_from_c1)
    # and its own exports reach the others
    await cs.export(m.index, "late", NS, use_clusterset_ip="true")
    await cs.wait_exported(m.index, "late", NS)
    assert (await cs.vip_of("late", NS)).startswith("243.9.")
    await cs.wait_import(0, "late", NS, ["c9"])


async def test_a_cluster_that_leaves_is_cleaned_off_the_broker_and_other_clusters(tmp_path: Path) -> None:
    async with ClusterSet(tmp_path, n=3) as cs3:
        ns = "m-leave"
        for i in range(3):
            await cs3.ensure_namespace(i, ns)
        await cs3.export(2, "solo", ns, svc=service("solo", ns, cluster_ip="127.10.9.3"))
        await cs3.export(0, "both", ns, svc=service("both", ns, cluster_ip="127.10.9.1"))
        await cs3.export(
            2,
            "both",
            ns,
            svc=service("both", ns, cluster_ip="127.10.9.3", ports=[{"name": "http", "port": 8080}]),
        )
        await cs3.wait_aggregate("solo", ns, ["c3"])
        await cs3.wait_aggregate("both", ns, ["c1", "c3"])
        await cs3.wait_condition(0, "both", ns, ConditionType.CONFLICT, "True", ConflictReason.PORT)
        for i in (0, 1):
            await cs3.wait_import(i, "solo", ns, ["c3"])

            async def c3_slices(i: int = i) -> bool:
                return "c3" in await cs3.imported_slices(i, "both", ns)

            await eventually(c3_slices)

        await cs3.leave(2)

        async def cleaned() -> bool:
            assert await get_or_none(cs3.broker_client, CLUSTER, "c3", BROKER_NS) is None
            for name in ("solo", "both"):
                assert all(e["spec"]["cluster"] != "c3" for e in await cs3.exported_services(name, ns))
                assert all(
                    labels_of(s).get(SOURCE_CLUSTER_LABEL) != "c3" for s in await cs3.broker_slices(name, ns)
                )
            assert await cs3.broker_import("solo", ns) is None, "aggregate of a service only c3 exported"
            for i in (0, 1):
                assert await cs3.local_import(i, "solo", ns) is None
                assert await cs3.imported_slices(i, "solo", ns) == {}
                assert "c3" not in await cs3.imported_slices(i, "both", ns)
            return True

        await eventually(cleaned, 15, what="c3's exports cleaned after it left")
        await cs3.wait_aggregate("both", ns, ["c1"])
        for i in (0, 1):
            await cs3.wait_import(i, "both", ns, ["c1"])
        await cs3.wait_condition(0, "both", ns, ConditionType.READY, "True")
        # the conflict with the departed cluster is cleared
        await cs3.wait_condition(0, "both", ns, ConditionType.CONFLICT, "False", ConflictReason.NO_CONFLICTS)


async def test_agent_reports_cluster_ready_and_heartbeat(cs: ClusterSet) -> None:
    async def reported() -> bool:
        for m in cs.clusters[:2]:
            c = await get_or_none(cs.broker_client, CLUSTER, m.id, BROKER_NS)
            assert c is not None
            beat = annotations_of(c).get(HEARTBEAT_ANNOTATION)
            assert beat and datetime.fromisoformat(beat.replace("Z", "+00:00")), f"{m.id}: heartbeat {beat!r}"
            conds = {x["type"]: x for x in (c.get("status") or {}).get("conditions") or []}
            assert conds.get("Ready", {}).get("status") == "True", f"{m.id}: Cluster conditions {conds}"
        return True

    await eventually(reported, what="Cluster Ready condition and heartbeat written by the agent")


async def test_simultaneous_joins_get_disjoint_cidrs(cs: ClusterSet) -> None:
    clients = [(await cs.spare_server(f"racer-{k}"))[1] for k in range(3)]
    results = await asyncio.gather(
        *(
            joinmod.join(
                cs.broker_client,
                client,
                cs.info,
                cluster_id=f"racer-{k}",
                enable_clusterset_ip=None,
                clusterset_ip_cidr=None,
                force=False,
                member_credentials=cs.member_credentials,
            )
            for k, client in enumerate(clients)
        )
    )
    stored = {
        c["metadata"]["name"]: ipaddress.ip_network(c["spec"]["clustersetIPCIDR"][0])
        for c in await list_dicts(cs.broker_client, CLUSTER, BROKER_NS)
    }
    assert all(f"racer-{k}" in stored for k in range(3)), sorted(stored)
    nets = list(stored.items())
    for a in range(len(nets)):
        for b in range(a + 1, len(nets)):
            assert not nets[a][1].overlaps(nets[b][1]), f"{nets[a]} overlaps {nets[b]}"
    assert len(results) == 3
    for k in range(3):
        await joinmod.leave(cs.broker_client, clients[k], cs.info.namespace, f"racer-{k}")
