"""The discovery control plane: deploy a broker, join and leave clusters, export services, and the
read models behind `isthmus show` (docs/discovery.md is the contract for every object touched).

Join is the one step with a race: two clusters joining at the same moment must never get
overlapping VIP CIDRs. Clusters are separate objects, so the API alone cannot serialize their
creation; every join therefore finishes by bumping an annotation on the single Broker object with
the resourceVersion it read *before* listing the clusters. Of two joins that planned from the same
snapshot only one bump succeeds; the other undoes its Cluster and plans again, now seeing the
winner's CIDR.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import ipaddress
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from lightkube import ALL_NS, ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta as LkObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.base import Condition, ObjectMeta, find_condition, format_time, now
from isthmus.api.mcs import (
    AGENT_NAMESPACE,
    BROKER_INFO_CONFIGMAP,
    BROKER_NAME,
    BROKER_SECRET_KEY,
    BROKER_SECRET_NAME,
    CLUSTER_UID_ANNOTATION,
    DEFAULT_CLUSTER_CIDR_PREFIX,
    DEFAULT_CLUSTERSET_IP_CIDR_RANGE,
    HEARTBEAT_ANNOTATION,
    JOIN_SERIAL_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_DISCOVERY_NAME,
    USE_CLUSTERSET_IP_ANNOTATION,
    Broker,
    BrokerSpec,
    Cluster,
    ClusterSpec,
    ConditionType,
    ServiceDiscovery,
    ServiceDiscoverySpec,
    ServiceExport,
    ServiceImport,
)
from isthmus.kube.helpers import (
    create_or_update,
    ensure_deleted,
    get_or_none,
    install_crds,
    is_conflict,
    is_not_found,
    list_all,
)
from isthmus.kube.resources import to_lightkube
from isthmus.mcs.allocator import CidrError, plan_cluster_cidr, validate_cluster_id
from isthmus.mcs.brokerinfo import BrokerInfo

FIELD_MANAGER = "isthmus-cli"
JOIN_ATTEMPTS = 40
CRD_TIMEOUT = 60.0

GLOBALNET_UNSUPPORTED = (
    "Globalnet is not supported with ClusterSet IPs: every pod behind an exported service would need "
    "its own global ingress IP, which does not scale (seed: Globalnet section); drop --globalnet"
)


class DiscoveryError(Exception):
    """A user-caused problem (bad input, state that forbids the request); the message is for users."""


# --- deploy-broker ------------------------------------------------------------------------------


def _check_namespace_name(namespace: str) -> None:
    problem = validate_cluster_id(namespace)
    if problem is not None:
        raise DiscoveryError(f"invalid namespace {namespace!r}: must be a DNS-1123 label")


def normalize_cidr_range(cidrs: Sequence[str] | None) -> list[str]:
    """The clusterset VIP range(s): split comma lists, require strict IPv4 networks that do not
    overlap one another; default 243.0.0.0/8 (set even when VIPs are off by default: the seed)."""
    items = [c.strip() for raw in (cidrs or []) for c in raw.split(",") if c.strip()]
    if not items:
        return [DEFAULT_CLUSTERSET_IP_CIDR_RANGE]
    nets: list[ipaddress.IPv4Network] = []
    for item in items:
        try:
            net = ipaddress.IPv4Network(item, strict=True)
        except ValueError as err:
            if "host bits set" in str(err):
                fixed = ipaddress.IPv4Network(item, strict=False)
                raise DiscoveryError(
                    f"clusterset IP CIDR range {item} has host bits set: the network is {fixed}; use that instead"
                ) from None
            raise DiscoveryError(
                f"clusterset IP CIDR range {item!r} is not a valid IPv4 network (a.b.c.d/n)"
            ) from None
        for other in nets:
            if net.overlaps(other):
                raise DiscoveryError(f"clusterset IP CIDR ranges {other} and {net} overlap")
        nets.append(net)
    return [str(n) for n in nets]


def _describe(spec: BrokerSpec) -> str:
    return (
        f"clustersetIPEnabled={str(spec.clusterset_ip_enabled).lower()}, "
        f"clustersetIPCIDRRange={','.join(spec.clusterset_ip_cidr_range)}"
    )


async def deploy_broker(
    client: AsyncClient,
    *,
    namespace: str,
    enable_clusterset_ip: bool,
    cidr_range: Sequence[str] | None,
    server_url: str,
    ca_pem: str | None,
    token: str | None,
) -> BrokerInfo:
    """Set up the broker namespace: CRDs, namespace, Broker `broker`, ConfigMap `broker-info`.

    Idempotent with the same settings. The clusterset settings cannot change once clusters may have
    joined (seed: changing the global flag needs a reinstall of the clusterset), so a re-run with
    different ones is a DiscoveryError naming the current settings.
    """
    _check_namespace_name(namespace)
    ranges = normalize_cidr_range(cidr_range)
    wanted = BrokerSpec(clusterset_ip_enabled=enable_clusterset_ip, clusterset_ip_cidr_range=ranges)
    async with asyncio.timeout(CRD_TIMEOUT):
        await install_crds(client, field_manager=FIELD_MANAGER)
    await ensure_namespace(client, namespace)

    def mutate(current: Broker | None) -> Broker | None:
        if current is None:
            return Broker(metadata=ObjectMeta(name=BROKER_NAME, namespace=namespace), spec=wanted)
        if current.spec != wanted:
            raise DiscoveryError(
                f"the broker in namespace {namespace} is already deployed with {_describe(current.spec)}; "
                f"clusterset settings cannot change once deployed (seed: reinstall the whole clusterset to "
                f"change them), so re-run with exactly these settings"
            )
        return None

    await create_or_update(client, Broker, BROKER_NAME, mutate, namespace=namespace, field_manager=FIELD_MANAGER)

    data = {
        "clustersetIPEnabled": str(enable_clusterset_ip).lower(),
        "clustersetIPCIDRRange": ",".join(ranges),
    }

    def mutate_cm(current: ConfigMap | None) -> ConfigMap:
        cm = current or ConfigMap(metadata=LkObjectMeta(name=BROKER_INFO_CONFIGMAP, namespace=namespace))
        cm.data = data
        return cm

    await create_or_update(
        client, ConfigMap, BROKER_INFO_CONFIGMAP, mutate_cm, namespace=namespace, field_manager=FIELD_MANAGER
    )
    return BrokerInfo(
        server=server_url,
        ca_pem=ca_pem,
        token=token,
        namespace=namespace,
        clusterset_ip_enabled=enable_clusterset_ip,
        clusterset_ip_cidr_range=ranges,
    )


async def ensure_namespace(client: AsyncClient, name: str) -> None:
    """Create the namespace unless it exists (a concurrent create is fine)."""
    if await get_or_none(client, Namespace, name) is not None:
        return
    try:
        await client.create(Namespace(metadata=LkObjectMeta(name=name)), field_manager=FIELD_MANAGER)
    except ApiError as err:
        if not is_conflict(err):
            raise


async def get_broker(client: AsyncClient, namespace: str) -> Broker:
    """The Broker object, or a DiscoveryError saying deploy-broker has not run there."""
    try:
        broker = await get_or_none(client, Broker, BROKER_NAME, namespace=namespace)
    except ApiError as err:  # the Broker CRD itself is unknown there
        if is_not_found(err):
            broker = None
        else:
            raise
    if broker is None:
        raise DiscoveryError(
            f"no broker in namespace {namespace} of the broker API: run `isthmus deploy-broker` there first"
        )
    return broker


# --- join ---------------------------------------------------------------------------------------


async def _cluster_uid(client: AsyncClient) -> str | None:
    ns = await get_or_none(client, Namespace, "kube-system")
    return ns.metadata.uid if ns is not None and ns.metadata is not None else None


async def _safe_get(client: AsyncClient, res: type[Any], name: str, namespace: str) -> Any:
    """GET that treats an unknown kind (CRDs not installed yet) like an absent object."""
    try:
        return await get_or_none(client, res, name, namespace=namespace)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise


async def join(
    broker_client: AsyncClient,
    cluster_client: AsyncClient,
    info: BrokerInfo,
    *,
    cluster_id: str,
    enable_clusterset_ip: bool | None,
    clusterset_ip_cidr: str | None,
    force: bool,
) -> Cluster:
    """Register `cluster_id` on the broker with a VIP CIDR, then configure the member cluster.

    Re-joining with the same ID keeps the CIDR. A different `clusterset_ip_cidr` for a registered
    ID, an ID another cluster holds, or a cluster already joined under another ID are errors unless
    `force` (then the registration is replaced). Returns the Cluster as stored on the broker.
    """
    problem = validate_cluster_id(cluster_id)
    if problem is not None:
        raise DiscoveryError(problem)
    namespace = info.namespace

    current_sd = cast(
        ServiceDiscovery | None,
        await _safe_get(cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE),
    )
    if current_sd is not None and current_sd.spec.cluster_id != cluster_id and not force:
        raise DiscoveryError(
            f"this cluster already joined as {current_sd.spec.cluster_id!r}: run `isthmus leave` first, "
            f"or pass --force to re-join as {cluster_id!r}"
        )
    uid = await _cluster_uid(cluster_client)

    broker, cluster = await _register(
        broker_client, namespace, cluster_id, uid, enable_clusterset_ip, clusterset_ip_cidr, force
    )

    async with asyncio.timeout(CRD_TIMEOUT):
        await install_crds(cluster_client, field_manager=FIELD_MANAGER)
    await ensure_namespace(cluster_client, AGENT_NAMESPACE)
    stored_info = dataclasses.replace(
        info,
        clusterset_ip_enabled=broker.spec.clusterset_ip_enabled,
        clusterset_ip_cidr_range=list(broker.spec.clusterset_ip_cidr_range),
    )
    secret_data = {BROKER_SECRET_KEY: base64.b64encode(stored_info.encode().encode()).decode("ascii")}

    def mutate_secret(current: Secret | None) -> Secret:
        secret = current or Secret(metadata=LkObjectMeta(name=BROKER_SECRET_NAME, namespace=AGENT_NAMESPACE))
        secret.data = secret_data
        secret.type = "Opaque"
        return secret

    await create_or_update(
        cluster_client, Secret, BROKER_SECRET_NAME, mutate_secret, namespace=AGENT_NAMESPACE,
        field_manager=FIELD_MANAGER,
    )
    spec = ServiceDiscoverySpec(
        cluster_id=cluster_id,
        clusterset_ip_enabled=(
            enable_clusterset_ip if enable_clusterset_ip is not None else broker.spec.clusterset_ip_enabled
        ),
        clusterset_ip_cidr=list(cluster.spec.clusterset_ip_cidr),
        broker_namespace=namespace,
    )

    def mutate_sd(current: ServiceDiscovery | None) -> ServiceDiscovery:
        if current is None:
            return ServiceDiscovery(
                metadata=ObjectMeta(name=SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE), spec=spec
            )
        current.spec = spec
        return current

    await create_or_update(
        cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, mutate_sd, namespace=AGENT_NAMESPACE,
        field_manager=FIELD_MANAGER,
    )
    return cluster


async def _register(
    client: AsyncClient,
    namespace: str,
    cluster_id: str,
    uid: str | None,
    enable_clusterset_ip: bool | None,
    requested: str | None,
    force: bool,
) -> tuple[Broker, Cluster]:
    """The broker half of join, serialized through the Broker's resourceVersion (module docstring)."""
    for attempt in range(JOIN_ATTEMPTS):
        broker = await get_broker(client, namespace)
        clusters = await list_all(client, Cluster, namespace=namespace)
        existing = next((c for c in clusters if c.name == cluster_id), None)
        taken = {c.name: c.spec.clusterset_ip_cidr[0] for c in clusters if c.spec.clusterset_ip_cidr}
        desired = _desired_cluster(
            broker, existing, taken, namespace, cluster_id, uid, enable_clusterset_ip, requested, force
        )
        if (existing is not None and desired.spec == existing.spec
                and desired.metadata.annotations == existing.metadata.annotations):
            return broker, existing  # already registered like this: nothing to serialize
        try:
            if existing is None:
                stored = Cluster.from_dict(await client.create(to_lightkube(desired), field_manager=FIELD_MANAGER))
            else:
                stored = Cluster.from_dict(await client.replace(to_lightkube(desired), field_manager=FIELD_MANAGER))
        except ApiError as err:
            if not is_conflict(err):
                raise
            await _backoff(attempt)
            continue
        if await _bump(client, broker):
            return broker, stored
        await _undo(client, namespace, existing, stored)
        await _backoff(attempt)
    raise DiscoveryError(
        f"could not register cluster {cluster_id!r}: {JOIN_ATTEMPTS} attempts lost to concurrent joins; try again"
    )


def _desired_cluster(
    broker: Broker,
    existing: Cluster | None,
    taken: dict[str, str],
    namespace: str,
    cluster_id: str,
    uid: str | None,
    enable_clusterset_ip: bool | None,
    requested: str | None,
    force: bool,
) -> Cluster:
    ranges = list(broker.spec.clusterset_ip_cidr_range)
    current_cidr = existing.spec.clusterset_ip_cidr[0] if existing and existing.spec.clusterset_ip_cidr else None
    if existing is not None and not force:
        other_uid = (existing.metadata.annotations or {}).get(CLUSTER_UID_ANNOTATION)
        if uid and other_uid and other_uid != uid:
            joined = f" (joined {format_time(existing.spec.joined_at)})" if existing.spec.joined_at else ""
            raise DiscoveryError(
                f"cluster ID {cluster_id!r} is already taken by another cluster{joined}: pick another "
                f"--cluster-id, or if that cluster is gone run `isthmus leave --broker-info FILE "
                f"--cluster-id {cluster_id}` (or pass --force to take the ID over)"
            )
    try:
        if current_cidr is not None and requested is None:
            cidr = current_cidr  # idempotent re-join keeps its block, even if the range has changed
        else:
            cidr = plan_cluster_cidr(ranges, taken, cluster_id, requested, DEFAULT_CLUSTER_CIDR_PREFIX)
    except CidrError as err:
        raise DiscoveryError(str(err)) from err
    if current_cidr is not None and cidr != current_cidr and not force:
        raise DiscoveryError(
            f"cluster {cluster_id!r} already has clusterset IP CIDR {current_cidr}; pass --force to change "
            f"it to {cidr} (VIPs already allocated from {current_cidr} keep working until their services "
            f"are unexported)"
        )
    if existing is not None:
        desired = existing.deepcopy()
        desired.metadata.managed_fields = None
    else:
        desired = Cluster(
            metadata=ObjectMeta(name=cluster_id, namespace=namespace),
            spec=ClusterSpec(cluster_id=cluster_id, joined_at=now()),
        )
    if uid:
        desired.metadata.annotations = {**(desired.metadata.annotations or {}), CLUSTER_UID_ANNOTATION: uid}
    desired.spec.clusterset_ip_cidr = [cidr]
    desired.spec.clusterset_ip_enabled = enable_clusterset_ip
    if desired.spec.joined_at is None:
        desired.spec.joined_at = now()
    return desired


async def _bump(client: AsyncClient, broker: Broker) -> bool:
    """Bump the join serial with the resourceVersion read before planning; False on 409."""
    bumped = broker.deepcopy()
    bumped.metadata.managed_fields = None
    annotations = dict(bumped.metadata.annotations or {})
    try:
        serial = int(annotations.get(JOIN_SERIAL_ANNOTATION, "0"))
    except ValueError:
        serial = 0
    annotations[JOIN_SERIAL_ANNOTATION] = str(serial + 1)
    bumped.metadata.annotations = annotations
    try:
        await client.replace(to_lightkube(bumped), field_manager=FIELD_MANAGER)
    except ApiError as err:
        if is_conflict(err):
            return False
        raise
    return True


async def _undo(client: AsyncClient, namespace: str, previous: Cluster | None, written: Cluster) -> None:
    """Take back a Cluster write whose bump lost: delete what we created, restore what we replaced."""
    if previous is None:
        await ensure_deleted(client, Cluster, written.name, namespace=namespace)
        return
    old_spec, old_annotations = previous.spec, previous.metadata.annotations

    def restore(current: Cluster | None) -> Cluster | None:
        if current is None or current.metadata.resource_version != written.metadata.resource_version:
            return None  # someone wrote after us: their state stands
        current.spec = old_spec
        current.metadata.annotations = old_annotations
        return current

    await create_or_update(client, Cluster, written.name, restore, namespace=namespace, retries=0,
                           field_manager=FIELD_MANAGER)


async def _backoff(attempt: int) -> None:
    await asyncio.sleep(random.uniform(0.005, 0.02 * min(attempt + 1, 10)))


# --- leave --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaveResult:
    """What `leave` removed."""

    cluster_id: str
    deregistered: bool
    """The Cluster existed on the broker and was deleted (its broker objects follow by GC)."""
    local_objects: int
    """ServiceDiscovery, Secret, ServiceImports and imported EndpointSlices deleted in the cluster."""


async def leave(
    broker_client: AsyncClient,
    cluster_client: AsyncClient | None,
    namespace: str,
    cluster_id: str,
) -> LeaveResult:
    """Deregister `cluster_id` and, with `cluster_client`, remove what join and the agent made there.

    Deleting the Cluster is enough on the broker: its ExportedServices and EndpointSlices are owned
    by it and garbage-collected. Works for a cluster that is gone (`cluster_client=None`). Objects in
    the broker namespace are never touched on the cluster side (the broker may share its API).
    """
    problem = validate_cluster_id(cluster_id)
    if problem is not None:
        raise DiscoveryError(problem)
    await get_broker(broker_client, namespace)
    deregistered = await ensure_deleted(broker_client, Cluster, cluster_id, namespace=namespace)
    removed = 0
    if cluster_client is not None:
        removed += await _delete_if_kind(cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE)
        removed += await ensure_deleted(cluster_client, Secret, BROKER_SECRET_NAME, namespace=AGENT_NAMESPACE)
        slices = await list_all(cluster_client, EndpointSlice, namespace=ALL_NS,
                                labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE})
        for s in slices:
            meta = s.metadata
            if meta is not None and meta.name and meta.namespace != namespace:
                removed += await ensure_deleted(cluster_client, EndpointSlice, meta.name, namespace=meta.namespace)
        for imp in await _list_if_kind(cluster_client, ServiceImport, ALL_NS):
            if imp.namespace != namespace:
                removed += await ensure_deleted(cluster_client, ServiceImport, imp.name, namespace=imp.namespace)
    return LeaveResult(cluster_id=cluster_id, deregistered=deregistered, local_objects=removed)


async def _delete_if_kind(client: AsyncClient, res: type[Any], name: str, namespace: str) -> int:
    try:
        return int(await ensure_deleted(client, res, name, namespace=namespace))
    except ApiError as err:
        if is_not_found(err):
            return 0
        raise


async def _list_if_kind(client: AsyncClient, res: type[Any], namespace: str | None) -> list[Any]:
    try:
        return await list_all(client, res, namespace=namespace)
    except ApiError as err:
        if is_not_found(err):  # the CRD is not installed: nothing of that kind exists
            return []
        raise


async def membership(cluster_client: AsyncClient) -> tuple[str, BrokerInfo]:
    """(cluster ID, broker-info) of a joined cluster, from what join stored there."""
    secret = await _safe_get(cluster_client, Secret, BROKER_SECRET_NAME, AGENT_NAMESPACE)
    sd = cast(
        ServiceDiscovery | None,
        await _safe_get(cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE),
    )
    if secret is None or sd is None:
        raise DiscoveryError(
            f"this cluster has not joined a clusterset (no Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} "
            f"or ServiceDiscovery {AGENT_NAMESPACE}/{SERVICE_DISCOVERY_NAME}): run `isthmus join` first"
        )
    raw = (secret.data or {}).get(BROKER_SECRET_KEY)
    if not raw:
        raise DiscoveryError(f"Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} has no {BROKER_SECRET_KEY!r} key")
    try:
        info = BrokerInfo.decode(base64.b64decode(raw))
    except ValueError as err:
        raise DiscoveryError(f"Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME}: {err}") from None
    return sd.spec.cluster_id, info


# --- export -------------------------------------------------------------------------------------

Change = Literal["created", "configured", "unchanged"]
_NO_MCS_CRDS = (
    "this cluster does not serve ServiceExports (the multicluster.x-k8s.io CRDs are not installed): "
    "run `isthmus join` first"
)


async def export(
    client: AsyncClient, name: str, namespace: str, use_clusterset_ip: bool | None
) -> tuple[ServiceExport, Change]:
    """Create (or update) the ServiceExport `namespace/name`.

    `use_clusterset_ip` sets the seed's annotation; None leaves an existing one as it is (the
    cluster's setting applies to a new export). Changing it later only moves the Conflict condition:
    the service's behaviour is fixed while it is exported (seed).
    """
    if await get_or_none(client, Namespace, namespace) is None:
        raise DiscoveryError(f"namespace {namespace!r} does not exist")

    def mutate(current: ServiceExport | None) -> ServiceExport | None:
        obj = current or ServiceExport(metadata=ObjectMeta(name=name, namespace=namespace))
        if use_clusterset_ip is None:
            return obj if current is None else None
        annotations = dict(obj.metadata.annotations or {})
        value = str(use_clusterset_ip).lower()
        if current is not None and annotations.get(USE_CLUSTERSET_IP_ANNOTATION) == value:
            return None
        annotations[USE_CLUSTERSET_IP_ANNOTATION] = value
        obj.metadata.annotations = annotations
        obj.metadata.managed_fields = None
        return obj

    try:
        before = await get_or_none(client, ServiceExport, name, namespace=namespace)
        stored = await create_or_update(client, ServiceExport, name, mutate, namespace=namespace,
                                        field_manager=FIELD_MANAGER)
    except ApiError as err:
        if is_not_found(err):
            raise DiscoveryError(_NO_MCS_CRDS) from None
        raise
    if stored is None:  # pragma: no cover - mutate always creates when absent
        raise AssertionError("ServiceExport vanished")
    if before is None:
        return stored, "created"
    changed = before.metadata.resource_version != stored.metadata.resource_version
    return stored, "configured" if changed else "unchanged"


async def unexport(client: AsyncClient, name: str, namespace: str) -> bool:
    """Delete the ServiceExport; whether one existed. The agent withdraws the service from the clusterset."""
    return bool(await _delete_if_kind(client, ServiceExport, name, namespace))


# --- read models for `isthmus show` -------------------------------------------------------------


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class ClusterRow:
    cluster_id: str
    cidrs: list[str]
    clusterset_ip_enabled: bool
    """The cluster's default for exports without the annotation (its own, else the broker's)."""
    enabled_source: Literal["cluster", "broker"]
    joined_at: datetime | None
    heartbeat: datetime | None
    ready: str | None
    """Status of the Cluster's Ready condition (the agent's), None when never reported."""

    def to_dict(self, at: datetime | None = None) -> dict[str, Any]:
        at = at or now()
        return {
            "clusterID": self.cluster_id,
            "clustersetIPCIDR": self.cidrs,
            "clustersetIPEnabled": self.clusterset_ip_enabled,
            "clustersetIPEnabledSource": self.enabled_source,
            "joinedAt": format_time(self.joined_at) if self.joined_at else None,
            "heartbeat": format_time(self.heartbeat) if self.heartbeat else None,
            "heartbeatAgeSeconds": int((at - self.heartbeat).total_seconds()) if self.heartbeat else None,
            "ready": self.ready,
        }


async def cluster_rows(broker_client: AsyncClient, namespace: str) -> list[ClusterRow]:
    """Every member cluster as the broker knows it, sorted by ID."""
    broker = await get_broker(broker_client, namespace)
    rows = []
    for c in sorted(await list_all(broker_client, Cluster, namespace=namespace), key=lambda c: c.name):
        ready = find_condition(c.status.conditions, "Ready")
        own = c.spec.clusterset_ip_enabled
        rows.append(ClusterRow(
            cluster_id=c.name,
            cidrs=list(c.spec.clusterset_ip_cidr),
            clusterset_ip_enabled=own if own is not None else broker.spec.clusterset_ip_enabled,
            enabled_source="cluster" if own is not None else "broker",
            joined_at=c.spec.joined_at,
            heartbeat=_parse_time((c.metadata.annotations or {}).get(HEARTBEAT_ANNOTATION)),
            ready=ready.status if ready else None,
        ))
    return rows


@dataclass(frozen=True)
class ConditionView:
    status: str
    reason: str
    message: str

    @classmethod
    def of(cls, cond: Condition | None) -> ConditionView | None:
        return None if cond is None else cls(str(cond.status), str(cond.reason), cond.message or "")

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class ExportRow:
    namespace: str
    name: str
    use_clusterset_ip: str | None
    """The annotation's value as written (None: the cluster's setting applies)."""
    valid: ConditionView | None
    ready: ConditionView | None
    conflict: ConditionView | None
    created: datetime | None

    def problems(self) -> list[str]:
        """Messages of the conditions that are not in their happy state, for a glance."""
        out = []
        for label, cond, happy in (("Valid", self.valid, "True"), ("Ready", self.ready, "True"),
                                   ("Conflict", self.conflict, "False")):
            if cond is not None and cond.status != happy and cond.message:
                out.append(f"{label}: {cond.message}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "useClustersetIP": self.use_clusterset_ip,
            "valid": self.valid.to_dict() if self.valid else None,
            "ready": self.ready.to_dict() if self.ready else None,
            "conflict": self.conflict.to_dict() if self.conflict else None,
            "creationTimestamp": format_time(self.created) if self.created else None,
        }


async def export_rows(client: AsyncClient, namespace: str | None) -> list[ExportRow]:
    """This cluster's ServiceExports (one namespace, or every one with namespace=None)."""
    items = await _list_if_kind(client, ServiceExport, namespace if namespace is not None else ALL_NS)
    rows = []
    for e in sorted(cast(list[ServiceExport], items), key=lambda e: (e.namespace or "", e.name)):
        conds = e.status.conditions
        rows.append(ExportRow(
            namespace=e.namespace or "",
            name=e.name,
            use_clusterset_ip=(e.metadata.annotations or {}).get(USE_CLUSTERSET_IP_ANNOTATION),
            valid=ConditionView.of(find_condition(conds, ConditionType.VALID)),
            ready=ConditionView.of(find_condition(conds, ConditionType.READY)),
            conflict=ConditionView.of(find_condition(conds, ConditionType.CONFLICT)),
            created=e.metadata.creation_timestamp,
        ))
    return rows


@dataclass(frozen=True)
class ImportRow:
    namespace: str
    name: str
    type: str
    ips: list[str]
    clusters: list[str]
    ports: list[dict[str, Any]]

    def port_text(self) -> str:
        parts = []
        for p in self.ports:
            text = f"{p['port']}/{p.get('protocol', 'TCP')}"
            parts.append(f"{p['name']}:{text}" if p.get("name") else text)
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "type": self.type,
            "ips": self.ips,
            "clusters": self.clusters,
            "ports": self.ports,
        }


async def import_rows(client: AsyncClient, namespace: str | None) -> list[ImportRow]:
    """This cluster's ServiceImports (the agent's copies of the aggregates)."""
    items = await _list_if_kind(client, ServiceImport, namespace if namespace is not None else ALL_NS)
    rows = []
    for i in sorted(cast(list[ServiceImport], items), key=lambda i: (i.namespace or "", i.name)):
        rows.append(ImportRow(
            namespace=i.namespace or "",
            name=i.name,
            type=str(i.spec.type),
            ips=list(i.spec.ips or []),
            clusters=sorted(c.cluster for c in i.status.clusters),
            ports=[p.to_dict() for p in i.spec.ports],
        ))
    return rows
