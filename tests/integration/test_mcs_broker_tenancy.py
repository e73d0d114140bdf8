"""Broker tenancy for discovery (issue 40 item 1): no object on the broker is writable by more than one
member. A member cluster, with the very broker token `isthmus join` gave it, cannot change what its
peers import: there is no shared aggregate to update, delete or drop peers from (each agent derives it
from the ExportedServices), a peer's own objects are refused to it, and a view it forges under its own
name for another cluster is never read (docs/discovery.md "Broker tenancy")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lightkube import ApiError
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.mcs import (
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    ExportedService,
    ServiceImport,
    broker_object_name,
)
from isthmus.clusterset.membership import membership
from isthmus.kube.resources import resource_for
from tests.harness.clusterset import (
    BROKER_NS,
    ClusterSet,
    as_dict,
    clusters_of,
    ips_of,
    ports_of,
    service,
)
from tests.harness.polling import eventually, never

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]
SI: Any = resource_for(ServiceImport)
ES: Any = resource_for(ExportedService)
NS = "tenancy"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("tenancy"), n=3) as cs:
        yield cs


async def _denied(call: Any) -> int:
    with pytest.raises(ApiError) as err:
        await call
    return int(err.value.status.code or 0)


async def _views(cs: ClusterSet) -> list[tuple[str, list[str], list[str], list[int]]]:
    """What every cluster imports of tenancy/web: (cluster, exporters, VIP, ports)."""
    out = []
    for m in cs.clusters:
        si = await cs.local_import(m.index, "web", NS)
        out.append((m.id, clusters_of(si), ips_of(si), sorted(p["port"] for p in ports_of(si).values()))
                   if si else (m.id, [], [], []))
    return out


async def test_a_members_token_cannot_change_what_its_peers_import(cs: ClusterSet) -> None:
    for i in range(3):
        await cs.ensure_namespace(i, NS)
    await cs.export(0, "web", NS, svc=service("web", NS, cluster_ip="127.10.9.1"), use_clusterset_ip="true")
    await cs.export(1, "web", NS, svc=service("web", NS, cluster_ip="127.10.9.2"), use_clusterset_ip="true")
    for i in range(3):
        await cs.wait_import(i, "web", NS, ["c1", "c2"])

    async def agreed() -> list[tuple[str, list[str], list[str], list[int]]]:
        views = await _views(cs)
        assert len({(tuple(v[1]), tuple(v[2]), tuple(v[3])) for v in views}) == 1 and len(views[0][2]) == 1, views
        return views

    before = await eventually(agreed)
    _, info = await membership(cs.c(2))
    c3 = info.client()
    agg_name = broker_object_name("web", NS)
    # (a) The aggregate: nothing is stored on the broker, and a member may write no ServiceImport
    # there, neither one claiming to be the aggregate nor its status (before: c3 could replace
    # status.clusters with [c3] and drop its peers, or delete the aggregate).
    forged = SI.from_dict({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                           "metadata": {"name": agg_name, "namespace": BROKER_NS,
                                        "labels": {SERVICE_NAME_LABEL: "web", SOURCE_NAMESPACE_LABEL: NS}},
                           "spec": {"type": "ClusterSetIP", "ips": ["127.33.6.6"], "ports": [{"port": 6666}]},
                           "status": {"clusters": [{"cluster": "c3"}]}})
    assert await _denied(c3.create(forged)) == 403
    assert await _denied(c3.patch(SI.Status, agg_name, {"status": {"clusters": [{"cluster": "c3"}]}},
                                  namespace=BROKER_NS, patch_type=PatchType.MERGE)) == 403
    assert await _denied(c3.delete(SI, agg_name, namespace=BROKER_NS)) == 403
    # (b) A peer's own view and slice: refused (the admission policy: only objects labelled with c3).
    c1_view = broker_object_name("web", NS, "c1")
    assert await _denied(c3.patch(ES, c1_view, {"spec": {"clustersetIPs": ["127.33.6.6"]}},
                                  namespace=BROKER_NS, patch_type=PatchType.MERGE)) == 403
    assert await _denied(c3.delete(ES, c1_view, namespace=BROKER_NS)) == 403
    assert await _denied(c3.delete(EndpointSlice, c1_view, namespace=BROKER_NS)) == 403
    # (c) A view c3 may write (its own label) that speaks for c1, with another VIP and port, claiming
    # an older export: admitted as c3's object, and never read by any agent.
    own = as_dict(await cs.broker_client.get(ES, c1_view, namespace=BROKER_NS))
    spec = {**own["spec"], "clustersetIPs": ["127.33.6.6"], "ports": [{"port": 6666, "protocol": "TCP"}],
            "exportCreationTimestamp": "2000-01-01T00:00:00Z"}
    await c3.create(ES.from_dict({
        "apiVersion": "isthmus.io/v1alpha1", "kind": "ExportedService",
        "metadata": {"name": broker_object_name("web", NS, "c3"), "namespace": BROKER_NS,
                     "labels": {SERVICE_NAME_LABEL: "web", SOURCE_NAMESPACE_LABEL: NS, SOURCE_CLUSTER_LABEL: "c3"}},
        "spec": spec}))

    async def changed() -> bool:
        return await _views(cs) != before

    await never(changed, 2.0, what="an import changed by c3's writes")
    assert await cs.broker_import("web", NS) is not None
    assert [v[1] for v in await _views(cs)] == [["c1", "c2"]] * 3
