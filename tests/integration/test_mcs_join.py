"""The discovery control plane (isthmus.clusterset.broker, .membership, isthmus.discovery.commands,
.views) against real embedded apiservers: deploy-broker, join (concurrency, idempotence,
force, bad input), leave (broker GC of the cluster's objects), export/unexport and the show rows."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import ServicePort as LkServicePort
from lightkube.models.core_v1 import ServiceSpec
from lightkube.models.discovery_v1 import Endpoint
from lightkube.models.meta_v1 import ObjectMeta as LkMeta
from lightkube.models.meta_v1 import OwnerReference as LkOwner
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret, Service, ServiceAccount
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.base import ObjectMeta, OwnerReference, now
from isthmus.api.mcs import (
    AGENT_NAMESPACE,
    BROKER_SECRET_KEY,
    BROKER_SECRET_NAME,
    HEARTBEAT_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_DISCOVERY_NAME,
    USE_CLUSTERSET_IP_ANNOTATION,
    Broker,
    Cluster,
    ConflictReason,
    ExportedService,
    ExportedServiceSpec,
    ServiceDiscovery,
    ServiceExport,
    ServiceImport,
    ServiceImportSpec,
    ServiceImportType,
    conflict_condition,
)
from isthmus.clusterset import broker, membership
from isthmus.clusterset.brokerinfo import BrokerInfo
from isthmus.clusterset.control import ClustersetError
from isthmus.discovery import commands as exports
from isthmus.discovery import views
from isthmus.kube.helpers import get, get_or_none, list_all, patch_status
from isthmus.kube.resources import to_lightkube
from tests.harness.apiserver import RunningApiServer

NS = "isthmus-broker"
TOKEN = "broker-secret-token"


@dataclass
class Env:
    tmp: Path
    broker: RunningApiServer
    bc: AsyncClient
    servers: list[RunningApiServer]
    member_credentials: bool = True

    async def member(self, name: str) -> AsyncClient:
        srv = RunningApiServer(self.tmp / name, bookmark_interval=1.0)
        await srv.start()
        self.servers.append(srv)
        return srv.client()

    async def deploy(self, **kw: object) -> BrokerInfo:
        args: dict[str, object] = {"namespace": NS, "enable_clusterset_ip": False, "cidr_range": None}
        args.update(kw)
        return await broker.deploy_broker(
            self.bc,
            server_url=self.broker.url,
            ca_pem=None,
            **args,  # type: ignore[arg-type]
        )


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    broker = RunningApiServer(tmp_path / "broker", bookmark_interval=1.0, token=TOKEN)
    await broker.start()
    e = Env(tmp_path, broker, broker.client(), [])
    try:
        yield e
    finally:
        for s in e.servers:
            await s.close()
        await broker.close()


async def _join(e: Env, client: AsyncClient, info: BrokerInfo, cid: str, **kw: object) -> Cluster:
    args: dict[str, object] = {"enable_clusterset_ip": None, "clusterset_ip_cidr": None, "force": False}
    args.update(kw)
    args.setdefault("member_credentials", e.member_credentials)
    return await membership.join(e.bc, client, info, cluster_id=cid, **args)  # type: ignore[arg-type]


# --- deploy-broker ------------------------------------------------------------------------------


async def test_deploy_broker_defaults_and_idempotent(env: Env) -> None:
    info = await env.deploy()
    assert info.clusterset_ip_cidr_range == ["243.0.0.0/8"] and not info.clusterset_ip_enabled
    # No credentials in broker-info: join gives every cluster its own.
    assert info.server == env.broker.url and info.token is None and info.namespace == NS
    assert "token" not in info.to_dict()
    broker = await get(env.bc, Broker, "broker", namespace=NS)
    assert broker.spec.clusterset_ip_cidr_range == ["243.0.0.0/8"]
    cm = await env.bc.get(ConfigMap, "broker-info", namespace=NS)
    assert cm.data == {"clustersetIPEnabled": "false", "clustersetIPCIDRRange": "243.0.0.0/8"}
    rv = broker.metadata.resource_version
    assert await env.deploy() == info
    assert (await get(env.bc, Broker, "broker", namespace=NS)).metadata.resource_version == rv


async def test_deploy_broker_settings_cannot_change(env: Env) -> None:
    await env.deploy(enable_clusterset_ip=True, cidr_range=["10.0.0.0/8, 11.0.0.0/16"])
    with pytest.raises(ClustersetError) as exc:
        await env.deploy(enable_clusterset_ip=False, cidr_range=None)
    assert (
        "already deployed with clustersetIPEnabled=true, clustersetIPCIDRRange=10.0.0.0/8,11.0.0.0/16"
        in str(exc.value)
    )
    info = await env.deploy(enable_clusterset_ip=True, cidr_range=["10.0.0.0/8", "11.0.0.0/16"])
    assert info.clusterset_ip_cidr_range == ["10.0.0.0/8", "11.0.0.0/16"]


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        (
            ["243.0.0.1/8"],
            "clusterset IP CIDR range 243.0.0.1/8 has host bits set: the network is 243.0.0.0/8",
        ),
        (["nonsense"], "clusterset IP CIDR range 'nonsense' is not a valid IP network (a.b.c.d/n or an IPv6 "
                       "network such as fd00:243::/48)"),
        (["fd00:243::/96"], "clusterset IP CIDR range fd00:243::/96 is smaller than one cluster's IPv6 block (/64)"),
        (["10.0.0.0/8,10.1.0.0/16"], "clusterset IP CIDR ranges 10.0.0.0/8 and 10.1.0.0/16 overlap"),
    ],
)
async def test_deploy_broker_bad_range(env: Env, ranges: list[str], message: str) -> None:
    with pytest.raises(ClustersetError) as exc:
        await env.deploy(cidr_range=ranges)
    assert str(exc.value).startswith(message)
    assert await get_or_none(env.bc, Namespace, NS) is None  # nothing written


# --- join ---------------------------------------------------------------------------------------


async def test_join_writes_cluster_and_member_objects(env: Env) -> None:
    info = await env.deploy(enable_clusterset_ip=True)
    c1 = await env.member("c1")
    cluster = await _join(env, c1, info, "c1")
    assert cluster.spec.clusterset_ip_cidr == ["243.0.0.0/16"]
    assert cluster.spec.clusterset_ip_enabled is None and cluster.spec.joined_at is not None
    sd = await get(c1, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE)
    assert sd.spec.cluster_id == "c1" and sd.spec.clusterset_ip_enabled is True
    assert sd.spec.clusterset_ip_cidr == ["243.0.0.0/16"] and sd.spec.broker_namespace == NS
    secret = await c1.get(Secret, BROKER_SECRET_NAME, namespace=AGENT_NAMESPACE)
    assert secret.data is not None
    stored = BrokerInfo.decode(base64.b64decode(secret.data[BROKER_SECRET_KEY]))
    # broker-info plus, with per-cluster credentials, the cluster's own broker token
    assert stored == dataclasses.replace(info, token=stored.token)
    assert stored.token is not None
    assert await membership.membership(c1) == ("c1", stored)

    c2 = await env.member("c2")
    cluster2 = await _join(env, c2, info, "c2", enable_clusterset_ip=False, clusterset_ip_cidr="243.7.0.0/20")
    assert (
        cluster2.spec.clusterset_ip_cidr == ["243.7.0.0/20"] and cluster2.spec.clusterset_ip_enabled is False
    )
    sd2 = await get(c2, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE)
    assert sd2.spec.clusterset_ip_enabled is False


async def test_concurrent_joins_never_overlap(env: Env) -> None:
    info = await env.deploy()
    members = [await env.member(f"m{i}") for i in range(5)]
    clusters = await asyncio.gather(*(_join(env, c, info, f"m{i}") for i, c in enumerate(members)))
    nets = [ipaddress.IPv4Network(c.spec.clusterset_ip_cidr[0]) for c in clusters]
    assert len({str(n) for n in nets}) == 5
    for a in nets:
        for b in nets:
            assert a is b or not a.overlaps(b)
    stored = await list_all(env.bc, Cluster, namespace=NS)
    assert sorted(c.name for c in stored) == [f"m{i}" for i in range(5)]
    assert {c.spec.clusterset_ip_cidr[0] for c in stored} == {f"243.{i}.0.0/16" for i in range(5)}


async def test_concurrent_joins_same_requested_cidr_one_wins(env: Env) -> None:
    info = await env.deploy()
    a, b = await env.member("a"), await env.member("b")
    results = await asyncio.gather(
        _join(env, a, info, "a", clusterset_ip_cidr="243.9.0.0/16"),
        _join(env, b, info, "b", clusterset_ip_cidr="243.9.0.0/16"),
        return_exceptions=True,
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], ClustersetError)
    assert "overlaps 243.9.0.0/16, the clusterset IP CIDR of cluster" in str(errors[0])
    assert len(await list_all(env.bc, Cluster, namespace=NS)) == 1


async def test_rejoin_is_idempotent_and_force_replaces(env: Env) -> None:
    info = await env.deploy()
    c1 = await env.member("c1")
    first = await _join(env, c1, info, "c1")
    again = await _join(env, c1, info, "c1")
    assert again.spec.clusterset_ip_cidr == first.spec.clusterset_ip_cidr
    assert again.metadata.resource_version == first.metadata.resource_version  # nothing rewritten
    same = await _join(env, c1, info, "c1", clusterset_ip_cidr="243.0.0.0/16")
    assert same.metadata.resource_version == first.metadata.resource_version

    with pytest.raises(ClustersetError) as exc:
        await _join(env, c1, info, "c1", clusterset_ip_cidr="243.5.0.0/16")
    assert str(exc.value).startswith(
        "cluster 'c1' already has clusterset IP CIDR 243.0.0.0/16; pass --force to change it to 243.5.0.0/16"
    )
    forced = await _join(env, c1, info, "c1", clusterset_ip_cidr="243.5.0.0/16", force=True)
    assert forced.spec.clusterset_ip_cidr == ["243.5.0.0/16"]
    assert forced.spec.joined_at == first.spec.joined_at
    sd = await get(c1, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE)
    assert sd.spec.clusterset_ip_cidr == ["243.5.0.0/16"]


async def test_duplicate_id_from_another_cluster(env: Env) -> None:
    info = await env.deploy()
    c1, other = await env.member("c1"), await env.member("other")
    await _join(env, c1, info, "c1")
    with pytest.raises(ClustersetError) as exc:
        await _join(env, other, info, "c1")
    assert str(exc.value).startswith("cluster ID 'c1' is already taken by another cluster (joined ")
    taken = await _join(env, other, info, "c1", force=True)
    assert taken.spec.clusterset_ip_cidr == ["243.0.0.0/16"]
    # A cluster joined under one ID cannot silently re-join under another.
    with pytest.raises(
        ClustersetError, match="this cluster already joined as 'c1': run `isthmus leave` first"
    ):
        await _join(env, other, info, "c2")


@pytest.mark.parametrize(
    ("cid", "cidr", "message"),
    [
        (
            "Bad_ID",
            None,
            "cluster ID 'Bad_ID' contains 'B', 'D', 'I', '_': only lower-case letters, digits and '-' are allowed",
        ),
        (
            "c1",
            "10.0.0.0/16",
            "clusterset IP CIDR 10.0.0.0/16 is not inside the clusterset IP CIDR range 243.0.0.0/8",
        ),
        (
            "c1",
            "243.0.0.1/16",
            "clusterset IP CIDR 243.0.0.1/16 has host bits set: the network is 243.0.0.0/16",
        ),
        ("c1", "banana", "clusterset IP CIDR 'banana' is not a valid IP network (a.b.c.d/n or an IPv6 network "
                        "such as fd00:243::/48)"),
        ("c1", "fd00::/64", "clusterset IP CIDR fd00::/64 is IPv6, but the clusterset IP CIDR range 243.0.0.0/8 "
                            "has no IPv6 range"),
        (
            "c1",
            "243.0.128.0/17",
            "clusterset IP CIDR 243.0.128.0/17 overlaps 243.0.0.0/16, the clusterset IP CIDR of cluster taken",
        ),
    ],
)
async def test_join_bad_input(env: Env, cid: str, cidr: str | None, message: str) -> None:
    info = await env.deploy()
    await _join(env, await env.member("taken"), info, "taken")
    c1 = await env.member("c1")
    with pytest.raises(ClustersetError) as exc:
        await _join(env, c1, info, cid, clusterset_ip_cidr=cidr)
    assert str(exc.value).startswith(message)
    assert [c.name for c in await list_all(env.bc, Cluster, namespace=NS)] == ["taken"]
    assert await get_or_none(c1, Namespace, AGENT_NAMESPACE) is None


async def test_join_without_broker(env: Env) -> None:
    info = BrokerInfo(server=env.broker.url, token=TOKEN, namespace="nowhere")
    with pytest.raises(ClustersetError, match="no broker in namespace nowhere of the broker API"):
        await _join(env, await env.member("c1"), info, "c1")


# --- leave --------------------------------------------------------------------------------------


async def _owned_objects(e: Env, cluster: Cluster) -> None:
    """What an agent publishes for one export: an ExportedService and an EndpointSlice, owned by the Cluster."""
    owner = OwnerReference(
        api_version=cluster.api_version, kind="Cluster", name=cluster.name, uid=cluster.metadata.uid or ""
    )
    es = ExportedService(
        metadata=ObjectMeta(name=f"web-shop-{cluster.name}", namespace=NS, owner_references=[owner]),
        spec=ExportedServiceSpec(
            cluster=cluster.name,
            service_name="web",
            service_namespace="shop",
            type=ServiceImportType.CLUSTER_SET_IP,
            export_creation_timestamp=now(),
        ),
    )
    await e.bc.create(to_lightkube(es))
    lk_owner = LkOwner(
        apiVersion=cluster.api_version, kind="Cluster", name=cluster.name, uid=cluster.metadata.uid or ""
    )
    await e.bc.create(
        EndpointSlice(
            metadata=LkMeta(name=f"web-shop-{cluster.name}", namespace=NS, ownerReferences=[lk_owner]),
            addressType="IPv4",
            endpoints=[Endpoint(addresses=["127.0.0.9"])],
        )
    )


async def _wait_gone(client: AsyncClient, cluster: str) -> None:
    async with asyncio.timeout(10):
        while True:
            names = [x.name for x in await list_all(client, ExportedService, namespace=NS)]
            slices = [
                s.metadata.name for s in await list_all(client, EndpointSlice, namespace=NS) if s.metadata
            ]
            if not any(cluster in n for n in names + slices):
                return
            await asyncio.sleep(0.05)


async def test_leave_live_cluster(env: Env) -> None:
    info = await env.deploy()
    c1, c2 = await env.member("c1"), await env.member("c2")
    cl1 = await _join(env, c1, info, "c1")
    cl2 = await _join(env, c2, info, "c2")
    await _owned_objects(env, cl1)
    await _owned_objects(env, cl2)
    # What c1's agent made locally: an imported slice, a ServiceImport; plus a user's own slice.
    await c1.create(Namespace(metadata=LkMeta(name="shop")))
    await c1.create(
        EndpointSlice(
            metadata=LkMeta(name="web-c2", namespace="shop", labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE}),
            addressType="IPv4",
            endpoints=[],
        )
    )
    await c1.create(
        EndpointSlice(metadata=LkMeta(name="mine", namespace="shop"), addressType="IPv4", endpoints=[])
    )
    await c1.create(
        to_lightkube(
            ServiceImport(
                metadata=ObjectMeta(name="web", namespace="shop"),
                spec=ServiceImportSpec(type=ServiceImportType.CLUSTER_SET_IP),
            )
        )
    )
    await c1.create(to_lightkube(ServiceExport(metadata=ObjectMeta(name="web", namespace="shop"))))

    result = await membership.leave(env.bc, c1, NS, "c1")
    # ServiceDiscovery, Secret, the imported slice and the ServiceImport, and join's two ClusterProperties.
    assert result == membership.LeaveResult(cluster_id="c1", deregistered=True, revoked=True,
                                            local_objects=6)
    await _wait_gone(env.bc, "c1")
    assert [c.name for c in await list_all(env.bc, Cluster, namespace=NS)] == ["c2"]
    assert [x.spec.cluster for x in await list_all(env.bc, ExportedService, namespace=NS)] == ["c2"]
    assert await get_or_none(c1, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE) is None
    assert await get_or_none(c1, Secret, BROKER_SECRET_NAME, namespace=AGENT_NAMESPACE) is None
    assert [s.metadata.name for s in await list_all(c1, EndpointSlice, namespace="shop") if s.metadata] == [
        "mine"
    ]
    assert await list_all(c1, ServiceImport, namespace="shop") == []
    assert len(await list_all(c1, ServiceExport, namespace="shop")) == 1  # the user's: untouched
    # Leaving twice is harmless; the cluster can join again (and gets the freed CIDR back).
    assert (await membership.leave(env.bc, c1, NS, "c1")).deregistered is False
    again = await _join(env, c1, info, "c1")
    assert again.spec.clusterset_ip_cidr == cl1.spec.clusterset_ip_cidr


async def test_leave_dead_cluster_broker_only(env: Env) -> None:
    info = await env.deploy()
    c1 = await env.member("c1")
    cl1 = await _join(env, c1, info, "c1")
    await _owned_objects(env, cl1)
    await env.servers[0].stop()  # the cluster is gone
    result = await membership.leave(env.bc, None, NS, "c1")
    assert result.deregistered and result.local_objects == 0
    await _wait_gone(env.bc, "c1")


# --- export and show ----------------------------------------------------------------------------


def _service(name: str, namespace: str) -> Service:
    return Service(metadata=LkMeta(name=name, namespace=namespace), spec=ServiceSpec(ports=[LkServicePort(port=80)]))


async def test_export_refuses_a_service_that_does_not_exist(env: Env) -> None:
    """As subctl does: a typo must not leave an export behind that no cluster will ever see."""
    info = await env.deploy()
    c1 = await env.member("c1")
    await _join(env, c1, info, "c1")
    await c1.create(Namespace(metadata=LkMeta(name="shop")))
    with pytest.raises(ClustersetError) as exc:
        await exports.export(c1, "nosuch", "shop", None)
    assert str(exc.value) == "service shop/nosuch not found (use --allow-missing to export it before it exists)"
    assert await list_all(c1, ServiceExport, namespace="shop") == []
    obj, change = await exports.export(c1, "nosuch", "shop", None, allow_missing=True)
    assert change == "created" and obj.name == "nosuch"


async def test_export_unexport_and_rows(env: Env) -> None:
    info = await env.deploy()
    c1 = await env.member("c1")
    await c1.create(Namespace(metadata=LkMeta(name="shop")))
    await c1.create(_service("web", "shop"))
    with pytest.raises(ClustersetError, match="CRDs are not installed"):
        await exports.export(c1, "web", "shop", None)
    await _join(env, c1, info, "c1")
    with pytest.raises(ClustersetError, match="namespace 'nope' does not exist"):
        await exports.export(c1, "web", "nope", None)
    obj, change = await exports.export(c1, "web", "shop", None)
    assert change == "created" and not (obj.metadata.annotations or {})
    assert (await exports.export(c1, "web", "shop", None))[1] == "unchanged"
    obj, change = await exports.export(c1, "web", "shop", True)
    assert change == "configured" and obj.metadata.annotations == {USE_CLUSTERSET_IP_ANNOTATION: "true"}
    assert (await exports.export(c1, "web", "shop", True))[1] == "unchanged"
    obj, change = await exports.export(c1, "db", "shop", False, allow_missing=True)  # no Service db yet
    assert change == "created" and obj.metadata.annotations == {USE_CLUSTERSET_IP_ANNOTATION: "false"}

    rows = await views.export_rows(c1, None)
    assert [(r.namespace, r.name, r.use_clusterset_ip) for r in rows] == [
        ("shop", "db", "false"),
        ("shop", "web", "true"),
    ]
    assert rows[0].valid is None and rows[0].to_dict()["valid"] is None

    assert await exports.unexport(c1, "web", "shop") is True
    assert await exports.unexport(c1, "web", "shop") is False
    assert [r.name for r in await views.export_rows(c1, "shop")] == ["db"]

    # Clusters as the broker knows them, with the agent's heartbeat.
    cl = await get(env.bc, Cluster, "c1", namespace=NS)
    cl.metadata.annotations = {
        **(cl.metadata.annotations or {}),
        HEARTBEAT_ANNOTATION: "2030-01-01T00:00:00Z",
    }
    cl.metadata.managed_fields = None
    await env.bc.replace(to_lightkube(cl))
    [row] = await views.cluster_rows(env.bc, NS)
    assert row.cluster_id == "c1" and row.cidrs == ["243.0.0.0/16"]
    assert row.clusterset_ip_enabled is False and row.enabled_source == "broker"
    assert row.to_dict()["heartbeat"] == "2030-01-01T00:00:00Z"


async def test_show_rows_split_conflicts_show_the_vip_and_mark_conflicted_imports(env: Env) -> None:
    info = await env.deploy()
    c1 = await env.member("c1")
    await _join(env, c1, info, "c1")  # the broker's default: no VIP
    await c1.create(Namespace(metadata=LkMeta(name="shop")))
    await c1.create(_service("web", "shop"))
    exported, _ = await exports.export(c1, "web", "shop", True)
    # What the agent writes for two conflicts: reasons comma-joined, messages joined with "; ".
    exported.status.conditions = [conflict_condition([
        (ConflictReason.PORT, "port http is 80/TCP in cluster c0 but 8080/TCP in cluster c1"),
        (ConflictReason.LABELS, 'label "tier" is "web" in cluster c0 but "api" in cluster c1'),
    ])]
    await patch_status(c1, exported, field_manager="test")
    await c1.create(to_lightkube(ServiceImport(
        metadata=ObjectMeta(name="web", namespace="shop"),
        spec=ServiceImportSpec(type=ServiceImportType.CLUSTER_SET_IP, ips=["243.0.0.7"]),
    )))

    [row] = await views.export_rows(c1, "shop")
    assert (row.vip(), row.wants_vip()) == ("243.0.0.7", "true")
    assert row.conflict_reasons() == ["PortConflict", "LabelsConflict"]
    assert row.problems() == [
        "Conflict: port http is 80/TCP in cluster c0 but 8080/TCP in cluster c1",
        'Conflict: label "tier" is "web" in cluster c0 but "api" in cluster c1',
    ]
    assert row.to_dict()["serviceIPs"] == ["243.0.0.7"]
    [imp] = await views.import_rows(c1, "shop")
    assert imp.conflicts == ["PortConflict", "LabelsConflict"] and imp.to_dict()["conflicts"] == imp.conflicts

    # Before the import exists, and without the annotation: the cluster's default is shown as such.
    await exports.export(c1, "other", "shop", None, allow_missing=True)
    other = next(r for r in await views.export_rows(c1, "shop") if r.name == "other")
    assert (other.vip(), other.wants_vip(), other.problems()) == ("-", "false (default)", [])


async def test_join_without_member_credentials_stores_broker_info_as_it_is(env: Env) -> None:
    """An open broker, or an old broker-info carrying a token: the member reaches the broker with it."""
    info = dataclasses.replace(await env.deploy(), token=TOKEN)
    c1 = await env.member("c1")
    await _join(env, c1, info, "c1", member_credentials=False)
    assert await membership.membership(c1) == ("c1", info)
    assert await get_or_none(env.bc, ServiceAccount, "cluster-c1", namespace=NS) is None


# --- dual-stack ClusterSet IP CIDRs ------------------------------------------------------------


async def test_join_dual_stack_blocks(env: Env) -> None:
    info = await env.deploy(cidr_range=["243.0.0.0/8,fd00:243::/48"])
    assert info.clusterset_ip_cidr_range == ["243.0.0.0/8", "fd00:243::/48"]
    c1, c2 = await env.member("c1"), await env.member("c2")
    cluster1 = await _join(env, c1, info, "c1")
    assert cluster1.spec.clusterset_ip_cidr == ["243.0.0.0/16", "fd00:243::/64"]
    sd = await get(c1, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE)
    assert sd.spec.clusterset_ip_cidr == ["243.0.0.0/16", "fd00:243::/64"]
    cluster2 = await _join(env, c2, info, "c2", clusterset_ip_cidr=["fd00:243:0:9::/64"])
    assert cluster2.spec.clusterset_ip_cidr == ["243.1.0.0/16", "fd00:243:0:9::/64"]
    # Re-joining keeps both blocks; another IPv6 block needs --force.
    assert (await _join(env, c2, info, "c2")).spec.clusterset_ip_cidr == ["243.1.0.0/16", "fd00:243:0:9::/64"]
    with pytest.raises(ClustersetError) as exc:
        await _join(env, c2, info, "c2", clusterset_ip_cidr="fd00:243:0:a::/64")
    assert str(exc.value).startswith(
        "cluster 'c2' already has clusterset IP CIDR fd00:243:0:9::/64; pass --force to change it to fd00:243:0:a::/64"
    )
    with pytest.raises(ClustersetError) as exc:
        await _join(env, await env.member("c3"), info, "c3", clusterset_ip_cidr="fd00:243::/64,fd00:243:0:1::/64")
    assert str(exc.value) == (
        "--clusterset-ip-cidr fd00:243::/64 and fd00:243:0:1::/64 are both IPv6: a cluster has at most one "
        "clusterset IP CIDR per IP family (one IPv4 and one IPv6)"
    )


async def test_rejoin_gains_the_family_the_broker_added(env: Env) -> None:
    info = await env.deploy()
    c1 = await env.member("c1")
    assert (await _join(env, c1, info, "c1")).spec.clusterset_ip_cidr == ["243.0.0.0/16"]
    # deploy-broker refuses to change a deployed broker's settings; an admin edits the Broker.
    stored = await get(env.bc, Broker, "broker", namespace=NS)
    stored.metadata.managed_fields = None
    stored.spec.clusterset_ip_cidr_range = ["243.0.0.0/8", "fd00:243::/48"]
    await env.bc.replace(to_lightkube(stored))
    assert (await _join(env, c1, info, "c1")).spec.clusterset_ip_cidr == ["243.0.0.0/16", "fd00:243::/64"]
