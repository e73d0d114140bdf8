"""Membership: `isthmus join` registers a cluster on the broker with its own VIP CIDR and configures
the cluster; `isthmus leave` undoes both; `membership` reads back what join stored in a cluster.

Broker credentials are per cluster: with the broker's admin credentials (`join --broker-kubeconfig`,
used for join and leave only, never stored) join creates the ServiceAccount `cluster-<id>` in the
broker namespace, binds it to the shared Role `isthmus-broker-member` (deploy/broker) and to a Role
for its own `Cluster`, and stores a TokenRequest token of that ServiceAccount (BROKER_TOKEN_SECONDS;
re-running join renews it) in the member's broker Secret. `leave` deletes the ServiceAccount: every
token of it stops authenticating, as the API server checks the ServiceAccount's UID.

Join is the one step with a race: two clusters joining at the same moment must never get
overlapping VIP CIDRs. Clusters are separate objects, so the API alone cannot serialize their
creation; every join therefore finishes by bumping an annotation on the single Broker object with
the resourceVersion it read *before* listing the clusters. Of two joins that planned from the same
snapshot only one bump succeeds; the other undoes its Cluster and plans again, now seeing the
winner's CIDR.

Join also writes the About API's ClusterProperties (KEP-2149, docs/clusterset.md):
`cluster.clusterset.k8s.io` (the cluster ID) before anything else in the cluster, `clusterset.k8s.io`
(the Broker's UID) last; both are checked before registering, so a join that would change an ID or a
clusterset someone else set writes nothing. `leave` removes what join wrote.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from lightkube import ALL_NS, ApiError, AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta as LkObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, Secret, ServiceAccount, ServiceAccountToken
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, Role, RoleBinding

from isthmus.api.about import (
    BROKER_ANNOTATION,
    CLUSTER_ID_PROPERTY,
    CLUSTERSET_PROPERTY,
    WRITTEN_BY_LABEL,
    WRITTEN_BY_VALUE,
    ClusterProperty,
    ClusterPropertySpec,
    clusterset_identity,
)
from isthmus.api.base import ObjectMeta, format_time, now
from isthmus.api.mcs import (
    AGENT_NAMESPACE,
    BROKER_MEMBER_ROLE,
    BROKER_SECRET_KEY,
    BROKER_SECRET_NAME,
    BROKER_TOKEN_SECONDS,
    CLUSTER_UID_ANNOTATION,
    DEFAULT_CLUSTER_CIDR_PREFIX,
    DEFAULT_CLUSTER_CIDR_PREFIX_V6,
    ISTHMUS_GROUP,
    JOIN_SERIAL_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_DISCOVERY_NAME,
    Broker,
    Cluster,
    ClusterSpec,
    ServiceDiscovery,
    ServiceDiscoverySpec,
    ServiceExport,
    ServiceImport,
    cluster_role_name,
    cluster_service_account,
    member_binding_name,
)
from isthmus.api.mcsvc import MANAGED_BY_LABEL as MCSVC_MANAGED_BY_LABEL
from isthmus.api.mcsvc import MANAGED_BY_VALUE as MCSVC_MANAGED_BY_VALUE
from isthmus.clusterset.broker import get_broker
from isthmus.clusterset.brokerinfo import BrokerInfo
from isthmus.clusterset.cidrs import (
    CidrError,
    plan_cluster_cidrs,
    same_family,
    split_cidrs,
    validate_cluster_id,
)
from isthmus.clusterset.control import (
    CRD_TIMEOUT,
    FIELD_MANAGER,
    ClustersetError,
    delete_if_kind,
    ensure_namespace,
    get_if_kind,
    list_if_kind,
)
from isthmus.clusterset.crds import apply_crd_plan, read_crd_plan
from isthmus.kube.helpers import (
    create_or_update,
    ensure_deleted,
    get_or_none,
    is_conflict,
    list_all,
    status_code,
)
from isthmus.kube.resources import to_lightkube

JOIN_ATTEMPTS = 40


async def _cluster_uid(client: AsyncClient) -> str | None:
    ns = await get_or_none(client, Namespace, "kube-system")
    return ns.metadata.uid if ns is not None and ns.metadata is not None else None


async def join(
    broker_client: AsyncClient,
    cluster_client: AsyncClient,
    info: BrokerInfo,
    *,
    cluster_id: str,
    enable_clusterset_ip: bool | None,
    clusterset_ip_cidr: str | Sequence[str] | None,
    force: bool,
    member_credentials: bool = True,
) -> Cluster:
    """Register `cluster_id` on the broker with a VIP CIDR, then configure the member cluster.

    With `member_credentials` (the broker client holds the broker's admin credentials) the cluster
    gets its own broker ServiceAccount and token (module docstring); without, the member stores
    `info` as it is and reaches the broker with its credentials (an open broker, or an old
    broker-info carrying a token). Re-joining with the same ID keeps the CIDRs (and gains a block of a family
    the broker's range gained since). `clusterset_ip_cidr` asks for at most one CIDR per family (a str:
    comma-separated). A different one for a registered
    ID, an ID another cluster holds, or a cluster already joined under another ID are errors unless
    `force` (then the registration is replaced). Returns the Cluster as stored on the broker.
    """
    problem = validate_cluster_id(cluster_id)
    if problem is not None:
        raise ClustersetError(problem)
    requested = split_cidrs(clusterset_ip_cidr)
    namespace = info.namespace
    crd_plan = await read_crd_plan(cluster_client)  # an incompatible shared CRD stops join before it registers

    current_sd = cast(
        ServiceDiscovery | None,
        await get_if_kind(cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE),
    )
    if current_sd is not None and current_sd.spec.cluster_id != cluster_id and not force:
        raise ClustersetError(
            f"this cluster already joined as {current_sd.spec.cluster_id!r}: run `isthmus leave` first, "
            f"or pass --force to re-join as {cluster_id!r}"
        )
    uid = await _cluster_uid(cluster_client)
    # The About API's properties are checked before anything is registered: a refused join writes nothing.
    clusterset = clusterset_identity(_uid_of(await get_broker(broker_client, namespace)))
    check_properties(*await _properties(cluster_client), cluster_id, clusterset, force)

    try:
        broker, cluster = await _register(
            broker_client, namespace, cluster_id, uid, enable_clusterset_ip, requested, force
        )
    except ApiError as err:
        if status_code(err) == 403:
            raise ClustersetError(
                f"the broker credentials may not register cluster {cluster_id!r} ({err.status.message}): "
                f"pass the broker's admin kubeconfig as --broker-kubeconfig"
            ) from None
        raise
    if member_credentials:  # after registering: a join refused (taken ID, bad CIDR) grants nothing
        await _grant(broker_client, namespace, cluster_id)
        info = dataclasses.replace(info, token=await _member_token(broker_client, namespace, cluster_id))

    async with asyncio.timeout(CRD_TIMEOUT):
        await apply_crd_plan(cluster_client, crd_plan, FIELD_MANAGER)
    await ensure_namespace(cluster_client, AGENT_NAMESPACE)
    # The ID first, membership last (KEP-2149: clusterset.k8s.io needs the cluster's ID to exist).
    await _put_property(cluster_client, CLUSTER_ID_PROPERTY, cluster_id, force)
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
    await _put_property(cluster_client, CLUSTERSET_PROPERTY, clusterset, force,
                        annotations={BROKER_ANNOTATION: f"{info.server} namespace {namespace}"})
    return cluster


# --- the About API (KEP-2149) ----------------------------------------------------------------------


def _uid_of(broker: Broker) -> str:
    uid = broker.metadata.uid
    if not uid:  # every stored object has one; a broker API that omits it cannot name the clusterset
        raise ClustersetError(f"the Broker in namespace {broker.namespace} has no metadata.uid")
    return uid


def _written_by_us(prop: ClusterProperty) -> bool:
    return (prop.metadata.labels or {}).get(WRITTEN_BY_LABEL) == WRITTEN_BY_VALUE


async def _properties(client: AsyncClient) -> tuple[ClusterProperty | None, ClusterProperty | None]:
    """(cluster.clusterset.k8s.io, clusterset.k8s.io); None when absent or the kind is not served yet
    (its CRD comes with join: a 404 either way)."""
    return (
        await get_or_none(client, ClusterProperty, CLUSTER_ID_PROPERTY),
        await get_or_none(client, ClusterProperty, CLUSTERSET_PROPERTY),
    )


def check_properties(
    id_prop: ClusterProperty | None, set_prop: ClusterProperty | None, cluster_id: str, clusterset: str,
    force: bool,
) -> None:
    """Refuse a join that would change the cluster's About API identity: KEP-2149 keeps a cluster's
    ID for its whole membership and lets it belong to one clusterset. --force replaces only what an
    earlier `isthmus join` wrote (as it replaces that join's registration); a value another tool or the
    user set is never overwritten."""
    if id_prop is not None and id_prop.value is not None and id_prop.value != cluster_id:
        ours = _written_by_us(id_prop)
        if not (force and ours):
            how = ("run `isthmus leave` first, or pass --force to re-join as "
                   f"{cluster_id!r}") if ours else (
                f"join with --cluster-id {id_prop.value}, or, if nothing else relies on it, "
                f"`kubectl delete clusterproperty {CLUSTER_ID_PROPERTY}` first")
            raise ClustersetError(
                f"this cluster's ClusterProperty {CLUSTER_ID_PROPERTY} names it {id_prop.value!r}, not "
                f"{cluster_id!r} (a cluster keeps its ID while it is in a clusterset): {how}")
    if set_prop is not None and set_prop.value is not None and set_prop.value != clusterset:
        ours = _written_by_us(set_prop)
        if not (force and ours):
            where = (set_prop.metadata.annotations or {}).get(BROKER_ANNOTATION)
            how = ("run `isthmus leave` first, or pass --force to move it to this broker" if ours else
                   "leave it with the tool that joined it first")
            raise ClustersetError(
                f"this cluster belongs to another clusterset: ClusterProperty {CLUSTERSET_PROPERTY} is "
                f"{set_prop.value!r}" + (f" (broker {where})" if where else "")
                + f", this broker's clusterset is {clusterset!r}: {how}")


async def _put_property(
    client: AsyncClient, name: str, value: str, force: bool, annotations: dict[str, str] | None = None
) -> None:
    """Create the property (labelled as join's) or set its value; what check_properties allowed."""

    def mutate(current: ClusterProperty | None) -> ClusterProperty:
        if current is None:
            return ClusterProperty(
                metadata=ObjectMeta(name=name, labels={WRITTEN_BY_LABEL: WRITTEN_BY_VALUE}, annotations=annotations),
                spec=ClusterPropertySpec(value=value),
            )
        if current.value is not None and current.value != value and not (force and _written_by_us(current)):
            # written since check_properties read it (another tool, or a concurrent join)
            raise ClustersetError(f"ClusterProperty {name} changed to {current.value!r} while joining as {value!r}")
        current.spec = ClusterPropertySpec(value=value)
        if annotations:
            current.metadata.annotations = {**(current.metadata.annotations or {}), **annotations}
        return current

    await create_or_update(client, ClusterProperty, name, mutate, field_manager=FIELD_MANAGER)


async def _remove_properties(client: AsyncClient, cluster_id: str, clusterset: str | None) -> tuple[int, list[str]]:
    """Delete what join wrote: clusterset.k8s.io naming this broker's clusterset (whoever wrote it: it
    must not outlive the membership), and cluster.clusterset.k8s.io when join created it with this ID.
    Returns (objects deleted, notes on what was kept and why)."""
    id_prop, set_prop = await _properties(client)
    removed, notes = 0, list[str]()
    if set_prop is not None:
        if clusterset is None or set_prop.value == clusterset:
            removed += await ensure_deleted(client, ClusterProperty, CLUSTERSET_PROPERTY)
        else:
            notes.append(f"ClusterProperty {CLUSTERSET_PROPERTY} kept: it names another clusterset "
                         f"({set_prop.value!r})")
    if id_prop is not None:
        if _written_by_us(id_prop) and id_prop.value in (cluster_id, None):
            removed += await ensure_deleted(client, ClusterProperty, CLUSTER_ID_PROPERTY)
        else:
            notes.append(f"ClusterProperty {CLUSTER_ID_PROPERTY} ({id_prop.value!r}) kept: "
                         + ("it was there before `isthmus join`" if id_prop.value == cluster_id
                            else "it names another cluster ID"))
    return removed, notes


# --- per-cluster broker credentials ---------------------------------------------------------------


def _binding(name: str, namespace: str, role: str, account: str) -> RoleBinding:
    return RoleBinding(
        metadata=LkObjectMeta(name=name, namespace=namespace),
        roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name=role),
        subjects=[Subject(kind="ServiceAccount", name=account, namespace=namespace)],
    )


async def _grant(client: AsyncClient, namespace: str, cluster_id: str) -> None:
    """ServiceAccount `cluster-<id>`, its Role on its own Cluster, and both RoleBindings (idempotent:
    server-side apply)."""
    account = cluster_service_account(cluster_id)
    own = cluster_role_name(cluster_id)
    objects: list[Any] = [
        ServiceAccount(metadata=LkObjectMeta(name=account, namespace=namespace)),
        Role(
            metadata=LkObjectMeta(name=own, namespace=namespace),
            rules=[
                PolicyRule(apiGroups=[ISTHMUS_GROUP], resources=["clusters", "clusters/status"],
                           resourceNames=[cluster_id], verbs=["get", "patch", "update"]),
            ],
        ),
        _binding(own, namespace, own, account),
        _binding(member_binding_name(cluster_id), namespace, BROKER_MEMBER_ROLE, account),
        # Beyond the broker namespace (exposure reads MultiClusterServices where the services live).
        ClusterRoleBinding(
            metadata=LkObjectMeta(name=cluster_binding_name(namespace, cluster_id)),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=BROKER_MEMBER_ROLE),
            subjects=[Subject(kind="ServiceAccount", name=account, namespace=namespace)],
        ),
    ]
    try:
        for obj in objects:
            scoped = None if isinstance(obj, ClusterRoleBinding) else namespace
            await cast(Any, client).apply(obj, field_manager=FIELD_MANAGER, force=True, namespace=scoped)
    except ApiError as err:
        if status_code(err) == 403:
            raise ClustersetError(
                f"the broker credentials may not set up cluster {cluster_id!r}'s ServiceAccount and roles "
                f"({err.status.message}): pass the broker's admin kubeconfig as --broker-kubeconfig"
            ) from None
        raise


def cluster_binding_name(namespace: str, cluster_id: str) -> str:
    """ClusterRoleBinding granting cluster `cluster_id` of the broker in `namespace` the ClusterRole
    BROKER_MEMBER_ROLE (cluster-scoped, hence the namespace in its name)."""
    return f"{BROKER_MEMBER_ROLE}-{namespace}-{cluster_id}"


async def _member_token(client: AsyncClient, namespace: str, cluster_id: str) -> str:
    """A new token (TokenRequest) of the cluster's broker ServiceAccount, valid BROKER_TOKEN_SECONDS."""
    account = cluster_service_account(cluster_id)
    request = ServiceAccountToken(metadata=LkObjectMeta(name=account, namespace=namespace),
                                  spec=TokenRequestSpec(audiences=[], expirationSeconds=BROKER_TOKEN_SECONDS))
    try:
        issued = await cast(Any, client).create(request, name=account, namespace=namespace)
    except ApiError as err:
        raise ClustersetError(
            f"the broker did not issue a token for ServiceAccount {namespace}/{account}: {err.status.message}"
        ) from None
    token = issued.status.token if issued.status is not None else None
    if not token:
        raise ClustersetError(f"the broker issued no token for ServiceAccount {namespace}/{account}")
    return cast(str, token)


async def _revoke(client: AsyncClient, namespace: str, cluster_id: str) -> int:
    """Delete what _grant made; deleting the ServiceAccount invalidates every token issued for it."""
    removed = 0
    removed += await ensure_deleted(client, ClusterRoleBinding, cluster_binding_name(namespace, cluster_id))
    for res, name in (
        (RoleBinding, member_binding_name(cluster_id)),
        (RoleBinding, cluster_role_name(cluster_id)),
        (Role, cluster_role_name(cluster_id)),
        (ServiceAccount, cluster_service_account(cluster_id)),
    ):
        removed += await ensure_deleted(client, res, name, namespace=namespace)
    return removed


async def _register(
    client: AsyncClient,
    namespace: str,
    cluster_id: str,
    uid: str | None,
    enable_clusterset_ip: bool | None,
    requested: list[str],
    force: bool,
) -> tuple[Broker, Cluster]:
    """The broker half of join, serialized through the Broker's resourceVersion (module docstring)."""
    for attempt in range(JOIN_ATTEMPTS):
        broker = await get_broker(client, namespace)
        clusters = await list_all(client, Cluster, namespace=namespace)
        existing = next((c for c in clusters if c.name == cluster_id), None)
        taken = {c.name: list(c.spec.clusterset_ip_cidr) for c in clusters if c.spec.clusterset_ip_cidr}
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
    raise ClustersetError(
        f"could not register cluster {cluster_id!r}: {JOIN_ATTEMPTS} attempts lost to concurrent joins; try again"
    )


def _desired_cluster(
    broker: Broker,
    existing: Cluster | None,
    taken: dict[str, list[str]],
    namespace: str,
    cluster_id: str,
    uid: str | None,
    enable_clusterset_ip: bool | None,
    requested: list[str],
    force: bool,
) -> Cluster:
    ranges = list(broker.spec.clusterset_ip_cidr_range)
    current = list(existing.spec.clusterset_ip_cidr) if existing else []
    if existing is not None and not force:
        other_uid = (existing.metadata.annotations or {}).get(CLUSTER_UID_ANNOTATION)
        if uid and other_uid and other_uid != uid:
            joined = f" (joined {format_time(existing.spec.joined_at)})" if existing.spec.joined_at else ""
            raise ClustersetError(
                f"cluster ID {cluster_id!r} is already taken by another cluster{joined}: pick another "
                f"--cluster-id, or if that cluster is gone run `isthmus leave --broker-info FILE "
                f"--cluster-id {cluster_id}` (or pass --force to take the ID over)"
            )
    try:
        # An idempotent re-join keeps its blocks, even if the range has changed; a family the broker's
        # range gained since gets a new block.
        cidrs = plan_cluster_cidrs(
            ranges, taken, cluster_id, requested, current,
            {"IPv4": DEFAULT_CLUSTER_CIDR_PREFIX, "IPv6": DEFAULT_CLUSTER_CIDR_PREFIX_V6},
        )
    except CidrError as err:
        raise ClustersetError(str(err)) from err
    replaced = [(old, new) for old in current for new in cidrs if old != new and same_family(old, new)]
    if replaced and not force:
        old, new = replaced[0]
        raise ClustersetError(
            f"cluster {cluster_id!r} already has clusterset IP CIDR {old}; pass --force to change "
            f"it to {new} (VIPs already allocated from {old} keep working until their services "
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
    desired.spec.clusterset_ip_cidr = cidrs
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
    revoked: bool
    """The cluster's broker ServiceAccount existed and was deleted (with its roles): its tokens are dead."""
    local_objects: int
    """ServiceDiscovery, Secret, ClusterProperties, ServiceImports and imported EndpointSlices deleted in the cluster."""
    notes: tuple[str, ...] = ()
    """What leave kept on purpose, for the user (a ClusterProperty join did not write)."""


async def leave(
    broker_client: AsyncClient,
    cluster_client: AsyncClient | None,
    namespace: str,
    cluster_id: str,
) -> LeaveResult:
    """Deregister `cluster_id` and, with `cluster_client`, remove what join and the agent made there.

    Deleting the Cluster is enough on the broker: its ExportedServices and EndpointSlices are owned
    by it and garbage-collected. The cluster's broker ServiceAccount, Role and RoleBindings go too
    (revoking its token); that takes the broker's admin credentials, a member's own token may not. Works for a cluster that is gone (`cluster_client=None`). Objects in
    the broker namespace are never touched on the cluster side (the broker may share its API).
    """
    problem = validate_cluster_id(cluster_id)
    if problem is not None:
        raise ClustersetError(problem)
    broker = await get_broker(broker_client, namespace)
    try:
        deregistered = await ensure_deleted(broker_client, Cluster, cluster_id, namespace=namespace)
        revoked = await _revoke(broker_client, namespace, cluster_id) > 0
    except ApiError as err:
        if status_code(err) == 403:
            raise ClustersetError(
                f"the broker credentials may not remove cluster {cluster_id!r} ({err.status.message}): "
                f"pass the broker's admin kubeconfig as --broker-kubeconfig"
            ) from None
        raise
    removed, notes = 0, list[str]()
    if cluster_client is not None:
        removed, notes = await _remove_properties(cluster_client, cluster_id, clusterset_identity(_uid_of(broker)))
        removed += await delete_if_kind(cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE)
        removed += await ensure_deleted(cluster_client, Secret, BROKER_SECRET_NAME, namespace=AGENT_NAMESPACE)
        slices = await list_all(cluster_client, EndpointSlice, namespace=ALL_NS,
                                labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE})
        for s in slices:
            meta = s.metadata
            if meta is not None and meta.name and meta.namespace != namespace:
                removed += await ensure_deleted(cluster_client, EndpointSlice, meta.name, namespace=meta.namespace)
        for imp in await list_if_kind(cluster_client, ServiceImport, ALL_NS):
            if imp.namespace != namespace:
                removed += await ensure_deleted(cluster_client, ServiceImport, imp.name, namespace=imp.namespace)
        # What the clusterset's MultiClusterServices made here goes with the membership (a user's own
        # ServiceExports stay: leaving withdraws them from the broker, the agent no longer runs for them).
        for exp in await list_if_kind(cluster_client, ServiceExport, ALL_NS):
            if (exp.metadata.labels or {}).get(MCSVC_MANAGED_BY_LABEL) == MCSVC_MANAGED_BY_VALUE:
                removed += await ensure_deleted(cluster_client, ServiceExport, exp.name, namespace=exp.namespace)
    return LeaveResult(cluster_id=cluster_id, deregistered=deregistered, revoked=revoked, local_objects=removed,
                       notes=tuple(notes))


async def membership(cluster_client: AsyncClient) -> tuple[str, BrokerInfo]:
    """(cluster ID, broker-info) of a joined cluster, from what join stored there."""
    secret = await get_if_kind(cluster_client, Secret, BROKER_SECRET_NAME, AGENT_NAMESPACE)
    sd = cast(
        ServiceDiscovery | None,
        await get_if_kind(cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE),
    )
    if secret is None or sd is None:
        raise ClustersetError(
            f"this cluster has not joined a clusterset (no Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} "
            f"or ServiceDiscovery {AGENT_NAMESPACE}/{SERVICE_DISCOVERY_NAME}): run `isthmus join` first"
        )
    raw = (secret.data or {}).get(BROKER_SECRET_KEY)
    if not raw:
        raise ClustersetError(f"Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} has no {BROKER_SECRET_KEY!r} key")
    try:
        info = BrokerInfo.decode(base64.b64decode(raw))
    except ValueError as err:
        raise ClustersetError(f"Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME}: {err}") from None
    return sd.spec.cluster_id, info



JOIN_POLL_SECONDS = 5.0
"""How often a component started before `isthmus join` looks again for the cluster's ID."""


async def wait_for_cluster_id(cluster_client: AsyncClient, on_wait: Callable[[str], None]) -> str:
    """The cluster ID join stored (ServiceDiscovery isthmus-system/isthmus), waiting as long as it
    takes: a member's components are installed before it joins, and one manifest fits every cluster.
    `on_wait(why)` is called once per poll while waiting."""
    while True:
        try:
            sd = cast(
                ServiceDiscovery | None,
                await get_if_kind(cluster_client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE),
            )
        except ApiError as err:  # e.g. 403 while RBAC is being set up: keep waiting, say why
            on_wait(f"cannot read {AGENT_NAMESPACE}/{SERVICE_DISCOVERY_NAME}: {err.status.message}")
        else:
            if sd is not None:
                return sd.spec.cluster_id
            on_wait(f"this cluster has not joined a clusterset yet (no ServiceDiscovery "
                    f"{AGENT_NAMESPACE}/{SERVICE_DISCOVERY_NAME}): waiting for `isthmus join`")
        await asyncio.sleep(JOIN_POLL_SECONDS)
