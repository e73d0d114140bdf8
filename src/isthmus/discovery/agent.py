"""The discovery agent: exports this cluster's services to the broker and imports everyone's.

One controller, keyed by service ("<namespace>/<name>"), level-triggered: whatever changed —
the ServiceExport, the Service, its EndpointSlices, another cluster's export on the broker,
the aggregate, a namespace appearing — the agent re-reads everything it knows about that
service from its caches and converges four things, in order:

1. this cluster's view on the broker (ExportedService + EndpointSlice), or its withdrawal; the view
   carries the service's VIP as this cluster holds it (allocated from its own CIDR by the first
   exporter, adopted by every later one);
2. the aggregated ServiceImport, derived here from every cluster's view (aggregate.derive), never
   written to the broker: every reader derives the same one (docs/discovery.md "Broker tenancy"), so
   no member can change what another imports, and exporters never race to create a shared object;
3. the ServiceExport's Valid / Ready / Conflict conditions;
4. the local ServiceImport and the EndpointSlices of every other cluster next to it.

A pass that has just published this cluster's view of a service (step 1, a new export) stops after
its slice: the watch event of that creation brings the service back, and by then the broker has
usually shown the other exporters' views too, so steps 3-4 write the conditions and the local
import once with every exporter in them instead of once per cluster as each arrives.

The rules are in docs/discovery.md; the merge and translation logic is pure (aggregate.py,
endpoints.py, allocator.py), so this module only reads caches and writes differences.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import OwnerReference as LkOwnerReference
from lightkube.resources.core_v1 import Namespace, Secret, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType
from prometheus_client import Counter

from isthmus.api.base import (
    Condition,
    KubeModel,
    ObjectMeta,
    OwnerReference,
    find_condition,
    format_time,
    merge_conditions,
    new_condition,
)
from isthmus.api.mcs import (
    AGENT_FIELD_MANAGER,
    AGENT_LEASE_NAME,
    AGENT_NAMESPACE,
    BROKER_SECRET_KEY,
    BROKER_SECRET_NAME,
    DEFAULT_DEAD_CLUSTER_GRACE,
    EXPORTED_PORTS_ANNOTATION,
    HEARTBEAT_ANNOTATION,
    ISTHMUS_GROUP,
    ISTHMUS_VERSION,
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
    ExportedService,
    ExportedServiceSpec,
    ReadyReason,
    ServiceDiscovery,
    ServiceDiscoverySpec,
    ServiceExport,
    ServiceImport,
    ServiceImportStatus,
    ServiceImportType,
    ValidReason,
    broker_object_name,
    conflict_condition,
)
from isthmus.clusterset.brokerinfo import BROKER_TIMEOUT, BrokerInfo
from isthmus.discovery import metrics
from isthmus.discovery.aggregate import Aggregate, decided_ips, derive
from isthmus.discovery.allocator import AllocatorFull, VipAllocator
from isthmus.discovery.endpoints import (
    InvalidAnnotation,
    PortSelector,
    broker_service_import,
    broker_slice,
    consumer_clusters,
    export_view,
    exported_ports,
    imported_slice_name,
    local_import_metadata,
    local_service_import,
    local_slice_copy,
    port_selected,
    validate_export,
    vip_setting,
)
from isthmus.discovery.liveness import Liveness
from isthmus.kube import helpers, keys
from isthmus.kube.resources import resource_for
from isthmus.runtime import (
    NORMAL,
    REGISTRY,
    WARNING,
    Controller,
    EventRecorder,
    LeaderElector,
    Result,
    SharedInformerFactory,
    object_labels,
    object_name,
    object_namespace,
)

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10.0
FAILED_RETRY_SECONDS = 5.0
PARSE_MEMO_SIZE = 1024
_M = TypeVar("_M", bound=KubeModel)

IGNORED_SLICES = Counter(
    "isthmus_agent_ignored_slices_total",
    "Broker EndpointSlices not imported, by reason (unregistered source cluster, source not listed in the "
    "aggregate, wrong name or owner, silent cluster).",
    ["reason"], registry=REGISTRY,
)

# Index names.
BY_SERVICE = "service"  # "<ns>/<svc>" from the MCS labels (broker objects, our local slice copies)
BY_KUBE_SERVICE = "kube-service"  # "<ns>/<svc>" from kubernetes.io/service-name (kube's own slices)
BY_SOURCE_CLUSTER = "source-cluster"  # broker slices by the cluster they claim to come from
UNREAD_METADATA = frozenset({"uid", "creationTimestamp", "generation"})
"""Metadata the agent never reads from most of its caches (see `_lead`)."""


class AgentConfigError(Exception):
    """The cluster joined under another ID, or its broker Secret is unusable: a user error, shown as is."""


class BrokerCredentialsRejected(AgentConfigError):
    """The broker answers 401 to this cluster's token: `isthmus leave` revoked it, or a re-join made
    a new ServiceAccount. The agent stops so that its restart reads the Secret join wrote again."""


class AgentNotJoined(AgentConfigError):
    """The cluster has not joined (yet): `isthmus agent` waits for `isthmus join`."""


def _source_cluster_key(obj: Any) -> list[str]:
    cluster = object_labels(obj).get(SOURCE_CLUSTER_LABEL)
    return [cluster] if cluster else []


def _dump(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if obj is not None else {}  # no typing.cast: it is a Python call, per object


def _annotations(obj: Any) -> dict[str, str]:
    return cast(dict[str, str], (_dump(obj).get("metadata") or {}).get("annotations") or {})


def _heartbeat_written_at(obj: Any) -> datetime | None:
    """When the broker recorded the last write of a Cluster by its agent (its own clock; heartbeats are
    the agent's only writes of the main resource), from metadata.managedFields."""
    for entry in (_dump(obj).get("metadata") or {}).get("managedFields") or []:
        if (entry.get("manager") == AGENT_FIELD_MANAGER and entry.get("operation") == "Update"
                and not entry.get("subresource") and entry.get("time")):
            try:
                return datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00"))
            except ValueError:
                return None
    return None


@dataclass
class ExportState:
    """What step 1 found out about this cluster's export of one service."""

    export: ServiceExport | None = None
    valid: bool = False
    reason: str = ""
    message: str = ""
    type: ServiceImportType | None = None
    spec: ExportedServiceSpec | None = None  # published view (None: not exporting)
    hold: bool = False  # malformed annotation: leave what is published as it is
    failure: str = ""  # why publishing failed (Ready=False Failed)
    pending: str = ""  # why it is not exported yet although nothing failed (Ready=False Pending)
    service: Service | None = None
    selectors: list[PortSelector] | None = None  # exported-ports annotation (None: every port)
    consumers: list[str] | None = None  # consumer-clusters annotation (None: every cluster)
    published: bool = False  # this pass created the export's view on the broker


@dataclass
class AggregateState:
    current: ServiceImport | None = None
    result: Aggregate | None = None
    failure: str = ""


class Agent:
    """The discovery agent of one member cluster. `run()` until cancelled (leader-elected)."""

    def __init__(
        self,
        *,
        cluster: AsyncClient,
        broker: AsyncClient,
        cluster_id: str,
        discovery: ServiceDiscoverySpec,
        workers: int = 4,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        identity: str | None = None,
        dead_cluster_grace: float = DEFAULT_DEAD_CLUSTER_GRACE,
    ) -> None:
        self.cluster = cluster
        self.broker = broker
        self.cluster_id = cluster_id
        self.discovery = discovery
        self.broker_ns = discovery.broker_namespace
        self.workers = workers
        self.elector = LeaderElector(
            cluster, AGENT_LEASE_NAME, AGENT_NAMESPACE, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period,
        )
        cidrs = discovery.clusterset_ip_cidr
        self.allocator: VipAllocator | None = VipAllocator(str(cidrs[0])) if cidrs else None
        self.recorder = EventRecorder(cluster, AGENT_FIELD_MANAGER)
        self.broker_recorder = EventRecorder(broker, f"{AGENT_FIELD_MANAGER}/{cluster_id}")
        self.liveness = Liveness(dead_cluster_grace)
        # Peers judge silence with the same grace (one clusterset, one setting): beat several times
        # within it, so one lost beat never looks like death.
        self.heartbeat_interval = min(HEARTBEAT_SECONDS, dead_cluster_grace / 4)
        self._silent: frozenset[str] = frozenset()
        self._ignored_logged: set[tuple[str, str]] = set()
        self._ready = asyncio.Event()
        self._controller: Controller | None = None
        self._cluster_uid: str | None = None
        self._held: dict[str, str] = {}
        """Broker ExportedService name → the VIP it holds (ours as we publish them, others' as seen)."""
        self._holders: dict[str, set[str]] = {}
        """VIP → the ExportedServices holding it: a VIP of our CIDR is free again once none does."""
        self._parse_memo: dict[int, tuple[Any, KubeModel]] = {}
        self._owner: tuple[Any, LkOwnerReference | None] = (None, None)
        self._published: dict[str, Any] = {}
        """What this agent last wrote of its own broker objects ("es/<name>", "slice/<name>"): while the
        cache lags behind its own writes, the same write is not sent again. Forgotten as soon as the
        cache shows the object again (our write, or anyone else's), or it is withdrawn: at 10,000
        services nothing of it stays in memory once the broker's watch has caught up."""
        metrics.track(self)

    # ------------------------------------------------------------------ construction

    @classmethod
    async def from_cluster(cls, client: AsyncClient, cluster_id: str | None, **kwargs: Any) -> Agent:
        """Build the agent from what `isthmus join` stored in the cluster; `cluster_id` None: the ID
        join stored (so one member manifest fits every cluster)."""
        try:
            sd = await helpers.get(client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, namespace=AGENT_NAMESPACE)
            secret = await client.get(Secret, BROKER_SECRET_NAME, namespace=AGENT_NAMESPACE)
        except ApiError as e:
            if helpers.is_not_found(e):
                raise AgentNotJoined(
                    f"this cluster has not joined a clusterset (no {AGENT_NAMESPACE}/{SERVICE_DISCOVERY_NAME}); "
                    "run `isthmus join` first") from None
            raise
        if cluster_id is None:
            cluster_id = sd.spec.cluster_id
        if sd.spec.cluster_id != cluster_id:
            raise AgentConfigError(
                f"this cluster joined as {sd.spec.cluster_id!r}, not {cluster_id!r}")
        raw = (secret.data or {}).get(BROKER_SECRET_KEY)
        if not raw:
            raise AgentConfigError(f"secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} has no {BROKER_SECRET_KEY!r}")
        info = BrokerInfo.decode(base64.b64decode(raw).decode())
        return cls(cluster=client, broker=info.client(timeout=BROKER_TIMEOUT), cluster_id=cluster_id,
                   discovery=sd.spec, **kwargs)

    # ------------------------------------------------------------------ lifecycle

    async def wait_ready(self) -> None:
        """Returns once this agent leads, its caches are synced and its VIP allocator is rebuilt."""
        await self._ready.wait()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def silent_peers(self) -> frozenset[str]:
        """The peers whose endpoints this agent withholds now (discovery/metrics.py reports them)."""
        return self._silent

    async def run(self) -> None:
        """Campaign for the Lease; while leading, run the controller. Never returns on its own."""
        try:
            while True:
                try:
                    await self.elector.run(self._lead)
                except* BrokerCredentialsRejected as group:
                    raise group.exceptions[0] from None
        finally:
            await self.recorder.aclose()
            await self.broker_recorder.aclose()

    async def _lead(self) -> None:
        log.info("agent %s leading", self.cluster_id)
        local = SharedInformerFactory(self.cluster)
        broker = SharedInformerFactory(self.broker)
        self._local = local
        self._broker = broker
        # At 10,000 services these caches hold 150,000 objects: they keep only the metadata the agent
        # reads (an export's uid, for its Events, and creation time, for conflicts; an import's uid,
        # owner of its slices; slices' owners, checked before import).
        self.exports = local.informer(resource_for(ServiceExport))
        self.services = local.informer(Service, drop_metadata=UNREAD_METADATA)
        self.slices = local.informer(EndpointSlice, drop_metadata=UNREAD_METADATA)
        self.imports = local.informer(resource_for(ServiceImport), drop_metadata=UNREAD_METADATA - {"uid"})
        self.namespaces = local.informer(Namespace)
        self.b_exports = broker.informer(resource_for(ExportedService), self.broker_ns,
                                         drop_metadata=UNREAD_METADATA | {"ownerReferences"})
        self.b_slices = broker.informer(EndpointSlice, self.broker_ns, drop_metadata=UNREAD_METADATA)
        # Peers' heartbeat times are read in the broker's clock, from managedFields (_heartbeat_written_at).
        self.b_clusters = broker.informer(resource_for(Cluster), self.broker_ns, keep_managed_fields=True)
        for inf in (self.slices, self.b_exports, self.b_slices):
            inf.add_indexer(BY_SERVICE, keys.mcs_keys)
        self.slices.add_indexer(BY_KUBE_SERVICE, keys.kube_slice_keys)
        # Each imported slice is cached twice, on the broker and as its local copy (30,000 pairs at
        # 10,000 services x 3 clusters): whichever arrives second takes the first's equal endpoints.
        self.slices.set_transform(self._share_with_broker_slice)
        self.b_slices.set_transform(self._share_with_local_copy)
        self.b_slices.add_indexer(BY_SOURCE_CLUSTER, _source_cluster_key)
        self._published = {}
        # Whatever the cache shows of one of our broker objects, written by us or changed by anyone
        # else, replaces what we remember having written (see _published).
        self.b_exports.add_handler(on_add=lambda o: self._forget("es", o), on_update=lambda _o, n: self._forget("es", n),
                                   on_delete=lambda o: self._forget("es", o))
        self._held, self._holders = {}, {}
        self.b_exports.add_handler(on_add=self._observe_hold, on_update=lambda _o, n: self._observe_hold(n),
                                   on_delete=lambda o: self._observe_hold(o, gone=True))
        self.b_slices.add_handler(on_add=lambda o: self._forget("slice", o),
                                  on_update=lambda _o, n: self._forget("slice", n),
                                  on_delete=lambda o: self._forget("slice", o))
        self.b_clusters.add_handler(on_add=self._observe_cluster, on_update=lambda _o, n: self._observe_cluster(n),
                                    on_delete=self._forget_cluster)

        # Thousands of services are normal; the queue's global limiter is for protecting the API
        # from retry storms, not for throttling the first sync.
        c = Controller(f"mcs-agent-{self.cluster_id}", self.reconcile, workers=self.workers, qps=500.0, burst=5000)
        c.watch(self.exports, keys.own_keys)
        c.watch(self.services, keys.own_keys)
        c.watch(self.slices, lambda o: keys.kube_slice_keys(o) + (
            keys.mcs_keys(o) if object_labels(o).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE else ()))
        c.watch(self.imports, keys.own_keys)
        # At start every key comes from the imports and exports themselves: mapping each Namespace
        # to its keys (a scan of every cache per namespace) would only repeat them.
        c.watch(self.namespaces, self._keys_in_namespace, initial=False)
        c.watch(self.b_exports, keys.mcs_keys)
        c.watch(self.b_slices, keys.mcs_keys)
        # Only our own Cluster object gates publishing (others leaving cascade through the broker's
        # GC of their ExportedServices); heartbeats touch only annotations, so spec changes, adds
        # and deletes are what count.
        c.watch(self.b_clusters, self._own_cluster_keys, initial=False,
                predicate=lambda old, new: old is None or _dump(old).get("spec") != _dump(new).get("spec"))
        # A cluster registering or leaving changes whose slices may be imported.
        c.watch(self.b_clusters, self._cluster_slice_keys,
                predicate=lambda old, new: old is None)
        self._controller = c
        local.start()
        broker.start()
        try:
            await local.wait_synced()
            while not await broker.wait_synced(timeout=BROKER_TIMEOUT):
                await self._report_waiting_for_broker()
            # Before allocating anything: every VIP already held from our CIDR (restarts, and a
            # cluster that got a departed cluster's CIDR) is marked taken, our own views' included.
            for obj in self.b_exports.cache.list():
                self._observe_hold(obj, starting=True)
            # Peers already silent stay withdrawn from the first reconcile on; the lists just
            # succeeded, so the broker is reachable.
            try:
                await self._judge_after_restart()
            except Exception as e:  # the heartbeat loop retries; peers then get a whole grace period
                log.warning("could not judge peers' heartbeats at start: %s", helpers.describe_error(e))
            self.liveness.link_ok()
            self._silent = self.liveness.silent()
            self._ready.set()
            log.info("agent %s ready (VIP CIDR %s, %d in use)", self.cluster_id,
                     self.allocator.cidr if self.allocator else "none", self.allocator.used if self.allocator else 0)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(c.run())
                tg.create_task(self._heartbeat())
                tg.create_task(self._judge_liveness())
        finally:
            self._ready.clear()
            self._controller = None
            await local.stop()
            await broker.stop()

    async def _report_waiting_for_broker(self) -> None:
        """Started while the broker is unreachable: nothing can be published, but every export says
        why (Ready=False Pending) instead of staying silent until the broker answers."""
        errors = {inf.last_error for inf in self._broker.informers if inf.last_error}
        why = f"waiting for the broker at {self.broker_server}: " + ("; ".join(sorted(errors)) or "no answer yet")
        for raw in self.exports.cache.list():
            state = ExportState(pending=why)
            self._check_export(object_namespace(raw) or "", object_name(raw), state)
            try:
                await self._sync_conditions(state, AggregateState())
            except Exception as e:
                log.warning("could not report on %s/%s: %s", object_namespace(raw), object_name(raw),
                            helpers.describe_error(e))

    @property
    def broker_server(self) -> str:
        try:
            return str(cast(Any, self.broker)._client.config.cluster.server)  # lightkube internals
        except AttributeError:
            return "its address in broker-info"

    async def _beat(self) -> Any:
        """One heartbeat: the annotation on our own Cluster (the only Cluster we may write). Returns it."""
        return await cast(Any, self.broker).patch(
            resource_for(Cluster), self.cluster_id,
            {"metadata": {"annotations": {HEARTBEAT_ANNOTATION: format_time(datetime.now(UTC))}}},
            namespace=self.broker_ns, patch_type=PatchType.MERGE, field_manager=AGENT_FIELD_MANAGER)

    async def _heartbeat(self) -> None:
        """Tell the broker this cluster's agent is alive: the heartbeat annotation (what peers and
        `isthmus show clusters` age) and a Ready condition on the Cluster's status. Its success or
        failure is also this agent's measure of whether it can see the broker (see liveness.py)."""
        while True:
            try:
                stored = await self._beat()
                await self._observe_peers()
                cluster = Cluster.from_dict(stored.to_dict())
                ready = new_condition(ConditionType.READY, True, ClusterReason.AGENT_RUNNING,
                                      f"the agent of cluster {self.cluster_id} is running", cluster.metadata.generation)
                merged = merge_conditions(cluster.status.conditions, [ready])
                if _conditions_key(merged) != _conditions_key(cluster.status.conditions):
                    cluster.status.conditions = merged
                    await helpers.patch_status_quiet(self.broker, cluster, field_manager=AGENT_FIELD_MANAGER,
                                                     patch_type=PatchType.MERGE)
            except (httpx2.TransportError, OSError) as e:  # the broker may be briefly unreachable: keep beating
                self.liveness.link_failed()
                log.warning("heartbeat to broker failed: %s", helpers.describe_error(e))
            except ApiError as e:
                if helpers.status_code(e) == 401:
                    raise BrokerCredentialsRejected(
                        f"the broker at {self.broker_server} rejects this cluster's token (401 Unauthorized): it "
                        f"was revoked (`isthmus leave`) or replaced (a new join); stopping, so that a restart "
                        f"reads Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} again") from None
                log.warning("heartbeat to broker failed: %s", helpers.describe_error(e))
            except Exception as e:
                log.warning("heartbeat to broker failed: %s", helpers.describe_error(e))
            await asyncio.sleep(self.heartbeat_interval)

    # ------------------------------------------------------------------ peers' liveness

    async def _observe_peers(self) -> None:
        """Read every peer's heartbeat from the broker itself, then count the link as up.

        Not from the informer: after an outage its watch may take many seconds to reconnect, and
        peers must not look silent meanwhile; a list that succeeded is a view known to be fresh.
        """
        peers = [o async for o in cast(Any, self.broker).list(resource_for(Cluster), namespace=self.broker_ns)]
        names = set()
        for obj in peers:
            names.add(object_name(obj))
            self._observe_cluster(obj)
        for gone in self.liveness.peers() - names:
            self.liveness.forget(gone)
        self.liveness.link_ok()

    def _observe_cluster(self, obj: Any) -> None:
        name = object_name(obj)
        if name == self.cluster_id:
            return
        self.liveness.observe(name, _annotations(obj).get(HEARTBEAT_ANNOTATION))
        if name in self._silent and name not in self.liveness.silent():
            self._apply_silence()  # it beats again: restore at once rather than at the next tick

    def _forget_cluster(self, obj: Any) -> None:
        self.liveness.forget(object_name(obj))

    def _cluster_slice_keys(self, cluster_obj: Any) -> list[str]:
        return sorted({k for o in self.b_slices.cache.by_index(BY_SOURCE_CLUSTER, object_name(cluster_obj))
                       for k in keys.mcs_keys(o)})

    async def _judge_liveness(self) -> None:
        """Withdraw silent peers' endpoints and restore returning ones (time-based, so a loop)."""
        period = max(0.2, min(5.0, self.liveness.grace / 4))
        while True:
            await asyncio.sleep(period)
            self._apply_silence()

    def _apply_silence(self) -> frozenset[str]:
        """Recompute the silent set; requeue every service of a cluster that changed side and say so
        with an Event on its broker `Cluster`. Returns the clusters that just went silent.

        The verdict is this agent's own: a member may write only its own Cluster on the broker, so the
        peer's status is left alone (it keeps what its own agent last wrote) and the Event says why.
        """
        silent = self.liveness.silent()
        changed = silent ^ self._silent
        if not changed:
            return frozenset()
        went, back = silent - self._silent, self._silent - silent
        self._silent = silent
        for name in sorted(went):
            log.warning("cluster %s: no heartbeat for over %.0f s: its endpoints are withdrawn from every import",
                        name, self.liveness.grace)
            self._post_verdict(name, silent=True)
        for name in sorted(back):
            log.info("cluster %s is alive again: its endpoints are imported again", name)
            self._post_verdict(name, silent=False)
        if self._controller is not None:
            for name in sorted(changed):
                for o in self.b_slices.cache.by_index(BY_SOURCE_CLUSTER, name):
                    for key in keys.mcs_keys(o):
                        self._controller.enqueue(key)
        return went

    def _post_verdict(self, name: str, *, silent: bool) -> None:
        """A Warning (withdrawn) or Normal (restored) Event on the peer's `Cluster`, from this cluster."""
        raw = self.b_clusters.cache.get(f"{self.broker_ns}/{name}") if self._controller is not None else None
        if raw is None:
            return
        if silent:
            age = self.liveness.silent_for(name)
            message = (f"no heartbeat from the agent of cluster {name} for "
                       f"{f'{age:.0f} s' if age is not None else 'longer than the grace period'} "
                       f"(grace {self.liveness.grace:.0f} s): cluster {self.cluster_id} withdrew its "
                       "endpoints from every import until it returns")
            self.broker_recorder.warning(raw, ClusterEventReason.WITHDRAWN, message)
        else:
            self.broker_recorder.normal(
                raw, ClusterEventReason.RESTORED,
                f"the agent of cluster {name} is back: cluster {self.cluster_id} imports its endpoints again")

    async def _judge_after_restart(self) -> None:
        """Peers already silent when this agent starts stay withdrawn until they beat again.

        Their age is read in the broker's clock, never this host's: the time the broker recorded for
        a peer's last heartbeat write (its agent's managedFields entry) against the time it records
        for our own heartbeat just now. Clock skew between clusters therefore cannot matter.
        """
        stored = await self._beat()
        now = _heartbeat_written_at(stored)
        if now is None:
            return
        for raw in self.b_clusters.cache.list():
            name = object_name(raw)
            written = _heartbeat_written_at(raw)
            if name == self.cluster_id or written is None or (now - written).total_seconds() <= self.liveness.grace:
                continue
            self.liveness.forget(name)
            self.liveness.observe(name, _annotations(raw).get(HEARTBEAT_ANNOTATION), marked_silent=True)

    def _share_with_broker_slice(self, obj: Any) -> None:
        """Transform of local slices: an MCS copy takes its broker slice's equal lists."""
        labels = obj.metadata.labels or {}
        service, cluster = labels.get(SERVICE_NAME_LABEL), labels.get(SOURCE_CLUSTER_LABEL)
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or not service or not cluster:
            return
        name = broker_object_name(service, obj.metadata.namespace or "", cluster)
        if (broker := self.b_slices.cache.get(f"{self.broker_ns}/{name}")) is not None:
            _share_lists(obj, broker)

    def _share_with_local_copy(self, obj: Any) -> None:
        """Transform of broker slices: one takes its local copy's equal lists."""
        labels = obj.metadata.labels or {}
        service, ns, cluster = (labels.get(SERVICE_NAME_LABEL), labels.get(SOURCE_NAMESPACE_LABEL),
                                labels.get(SOURCE_CLUSTER_LABEL))
        if not service or not ns or not cluster:
            return
        if (local := self.slices.cache.get(f"{ns}/{imported_slice_name(service, cluster)}")) is not None:
            _share_lists(obj, local)

    def _forget(self, kind: str, obj: Any) -> None:
        self._published.pop(f"{kind}/{object_name(obj)}", None)

    def _export_spec(self, raw: Any) -> ExportedServiceSpec:
        """The spec of a cached ExportedService (see _parsed): the spec alone is parsed, which is
        all that aggregation reads (half the cost of the whole object)."""
        spec = raw.get("spec") if isinstance(raw, dict) else None
        if not isinstance(spec, dict):
            return self._parsed(ExportedService, raw).spec  # the model says what is wrong with it
        return self._parsed(ExportedServiceSpec, spec)

    def _parsed(self, model: type[_M], raw: Any) -> _M:
        """A cached object as `model`, parsed once per cached object: one reconcile reads each
        exporter's spec several times, and a busy service is reconciled again within moments.
        Read-only (shared, as the cache's objects are); the memo keeps the last thousand it parsed."""
        hit = self._parse_memo.get(id(raw))
        if hit is not None and hit[0] is raw:
            return hit[1]  # type: ignore[return-value]  # no typing.cast: it is a Python call, per read
        parsed = model.from_dict(raw)
        self._parse_memo[id(raw)] = (raw, parsed)
        if len(self._parse_memo) > PARSE_MEMO_SIZE:
            self._parse_memo.pop(next(iter(self._parse_memo)))
        return parsed

    # ------------------------------------------------------------------ VIP bookkeeping

    def _observe_hold(self, obj: Any, *, gone: bool = False, starting: bool = False) -> None:
        """Another cluster's view (or, at start, any view) as the cache shows it: the VIP it holds.

        Our own views are booked when we publish them (`_hold`), never from the cache, which may
        still show an older version of one while a newer one is being written."""
        if object_labels(obj).get(SOURCE_CLUSTER_LABEL) == self.cluster_id and not starting:
            return
        ips = None if gone else ((_dump(obj).get("spec") or {}).get("clustersetIPs") or None)
        self._hold(object_name(obj), str(ips[0]) if ips else None)

    def _hold(self, holder: str, ip: str | None) -> None:
        """Record that broker ExportedService `holder` holds `ip` (None: nothing). A VIP of our CIDR is
        reserved while anyone holds it and freed when the last holder lets go: the VIP is freed only
        when no cluster exports the service any more, by the cluster whose CIDR holds it."""
        old = self._held.get(holder)
        if old == ip:
            return
        if old is not None:
            holders = self._holders.get(old, set())
            holders.discard(holder)
            if not holders:
                self._holders.pop(old, None)
                if self.allocator is not None and self.allocator.contains(old) and self.allocator.in_use(old):
                    self.allocator.release(old)
                    log.info("released ClusterSet IP %s", old)
        if ip is None:
            self._held.pop(holder, None)
            return
        self._held[holder] = ip
        self._holders.setdefault(ip, set()).add(holder)
        if self.allocator is not None and self.allocator.contains(ip) and not self.allocator.in_use(ip):
            self.allocator.reserve(ip)

    # ------------------------------------------------------------------ key mapping

    def _keys_in_namespace(self, ns_obj: Any) -> list[str]:
        ns = object_name(ns_obj)
        return [k for k in self._all_keys() if keys.service_of(k)[0] == ns]

    def _own_cluster_keys(self, cluster_obj: Any) -> list[str]:
        if object_name(cluster_obj) != self.cluster_id:
            return []
        return sorted(k for o in self.exports.cache.list() for k in keys.own_keys(o))

    def _all_keys(self) -> list[str]:
        found: set[str] = set()
        for obj in self.b_exports.cache.list():
            found.update(keys.mcs_keys(obj))
        for obj in self.exports.cache.list():
            found.update(keys.own_keys(obj))
        return sorted(found)

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        try:
            return await self._reconcile(key)
        except ApiError as e:
            if not helpers.is_conflict(e):
                raise
            # Our local ServiceImport changed under us (its resourceVersion is checked): look again
            # soon (with jitter to break lockstep) instead of backing off.
            return Result(requeue_after=0.02 + random.random() * 0.08)

    async def _reconcile(self, key: str) -> Result | None:
        ns, name = keys.service_of(key)
        state = ExportState()
        try:
            await self._sync_export(ns, name, state)
            if state.published:
                # Aggregate on the pass this creation brings back (see the module's docstring). Its
                # event always comes: had the broker held the view already, the cache would lag it
                # and the view's ADDED event would still be on its way.
                await self._sync_slice(ns, name, state, self._derive(ns, name, state))
                return None
            agg = self._derive(ns, name, state)
            await self._sync_slice(ns, name, state, agg)
        except (httpx2.TransportError, OSError) as e:
            # The broker is unreachable: still tell the user where the export stands, then retry.
            self.liveness.link_failed()
            state.pending = f"waiting for the broker: {helpers.describe_error(e)}"
            await self._sync_conditions(state, AggregateState())
            raise
        await self._sync_conditions(state, agg)
        await self._sync_import(ns, name, agg.current, self._sources_for_us(ns, name, state))
        if state.failure or agg.failure:
            return Result(requeue_after=FAILED_RETRY_SECONDS)  # e.g. a full CIDR: a VIP may free up
        return None

    # -- 1. this cluster's view on the broker

    def _cluster_owner(self) -> LkOwnerReference | None:
        """Our Cluster on the broker as the owner of what we publish there. Read-only: one instance
        per cached Cluster object, shared by every object that names it."""
        obj = self.b_clusters.cache.get(f"{self.broker_ns}/{self.cluster_id}")
        if obj is None:
            return None
        if self._owner[0] is not obj:
            uid = _dump(obj).get("metadata", {}).get("uid")
            self._owner = (obj, LkOwnerReference(apiVersion=f"{ISTHMUS_GROUP}/{ISTHMUS_VERSION}", kind="Cluster",
                                                 name=self.cluster_id, uid=uid, blockOwnerDeletion=False))
        return self._owner[1]

    def _check_export(self, ns: str, name: str, state: ExportState) -> bool | None:
        """The local half of step 1 (no broker needed): fills `state`; returns the export's VIP wish
        when it can be published, None when it cannot."""
        raw = self.exports.cache.get(f"{ns}/{name}")
        if raw is None:
            return None
        export = self._parsed(ServiceExport, raw)
        service = self.services.cache.get(f"{ns}/{name}")
        state.export, state.service = export, service
        try:
            vip = vip_setting(export.metadata.annotations, self.discovery.clusterset_ip_enabled)
            state.selectors = exported_ports(export.metadata.annotations)
            state.consumers = consumer_clusters(export.metadata.annotations)
        except InvalidAnnotation as e:
            state.reason, state.message, state.hold = ValidReason.INVALID_ANNOTATION, str(e), True
            return None
        state.valid, state.reason, state.message, state.type = validate_export(service)
        if state.valid and service is not None and state.selectors is not None and not any(
                port_selected(state.selectors, p.name, p.port)
                for p in (service.spec.ports if service.spec is not None else None) or []):
            state.valid, state.reason = False, ValidReason.INVALID_ANNOTATION
            state.message = (f"no port of the Service matches annotation {EXPORTED_PORTS_ANNOTATION} "
                             f"({(export.metadata.annotations or {}).get(EXPORTED_PORTS_ANNOTATION)})")
        return vip if state.valid and service is not None else None

    async def _sync_export(self, ns: str, name: str, state: ExportState) -> None:
        """Fills `state` as it learns, so a broker failure half-way still leaves what was found."""
        vip = self._check_export(ns, name, state)
        if vip is None:
            if not state.hold:  # a malformed annotation leaves what is published as it is
                await self._withdraw(ns, name)
            return
        export, service = state.export, state.service
        assert export is not None and service is not None
        owner = self._cluster_owner()
        if owner is None:
            state.failure = (f"cluster {self.cluster_id} is not registered on the broker "
                             "(it left or never joined): run `isthmus join`")
            return
        created = export.metadata.creation_timestamp or datetime.now(UTC)
        spec = export_view(self.cluster_id, service, created, export.spec.exported_labels,
                           export.spec.exported_annotations, vip, selectors=state.selectors,
                           consumers=state.consumers)
        bname = broker_object_name(name, ns, self.cluster_id)
        current = self.b_exports.cache.get(f"{self.broker_ns}/{bname}")
        spec = self._decide_vip(ns, name, state, spec, current)
        state.spec = spec
        if current is None or self._export_spec(current) != spec:
            key = f"es/{bname}"
            if self._published.get(key) == spec:
                return  # written already; the cache has not shown it yet (a busy broker's watch lags)
            desired = ExportedService(
                metadata=ObjectMeta(
                    name=bname, namespace=self.broker_ns,
                    labels={SERVICE_NAME_LABEL: name, SOURCE_NAMESPACE_LABEL: ns, SOURCE_CLUSTER_LABEL: self.cluster_id},
                    owner_references=[OwnerReference.from_dict(owner.to_dict())],
                ),
                spec=spec,
            )
            await helpers.apply_quiet(self.broker, desired, field_manager=AGENT_FIELD_MANAGER, force=True)
            self._published[key] = spec
            state.published = current is None

    def _decide_vip(self, ns: str, name: str, state: ExportState, spec: ExportedServiceSpec,
                    current: Any) -> ExportedServiceSpec:
        """`spec` with the service's VIP as this cluster is to hold it (docs/discovery.md "ClusterSet
        IP"): the oldest decision among the exporters (ours included, as last published), else ours
        now: a VIP from our CIDR when the service wants one, else none. An allocation failure leaves
        the decision open and is this export's failure (Ready=False Failed, retried)."""
        bname = broker_object_name(name, ns, self.cluster_id)
        published = self._published.get(f"es/{bname}")
        before = published if isinstance(published, ExportedServiceSpec) else (
            self._export_spec(current) if current is not None else None)
        mine = spec.model_copy(update={
            "clusterset_ips": before.clusterset_ips if before is not None else None,
            "clusterset_ip_allocated_by": before.clusterset_ip_allocated_by if before is not None else None})
        others = [e for e in self._exporters(ns, name, ExportState()) if e.cluster != self.cluster_id]
        decided = decided_ips([*others, mine])
        ips: list[str] | None = None
        allocated_by: str | None = None
        if decided is not None:
            ips, allocated_by = decided
        elif state.type == ServiceImportType.HEADLESS or not spec.clusterset_ip_enabled:
            ips = []
        elif self.allocator is None:
            state.failure = f"cluster {self.cluster_id} has no ClusterSet IP CIDR"
        else:
            try:
                ips, allocated_by = [self.allocator.allocate()], self.cluster_id
                log.info("%s/%s: ClusterSet IP %s allocated", ns, name, ips[0])
            except AllocatorFull:
                state.failure = f"no free ClusterSet IP left in {self.allocator.cidr}"
        self._hold(bname, ips[0] if ips else None)
        return spec.model_copy(update={"clusterset_ips": ips, "clusterset_ip_allocated_by": allocated_by})

    async def _withdraw(self, ns: str, name: str) -> None:
        bname = broker_object_name(name, ns, self.cluster_id)
        self._hold(bname, None)
        self._published.pop(f"es/{bname}", None)
        self._published.pop(f"slice/{bname}", None)
        if self.b_exports.cache.get(f"{self.broker_ns}/{bname}") is not None:
            await helpers.ensure_deleted(self.broker, ExportedService, bname, namespace=self.broker_ns)
        if self.b_slices.cache.get(f"{self.broker_ns}/{bname}") is not None:
            await helpers.ensure_deleted(self.broker, EndpointSlice, bname, namespace=self.broker_ns)

    # -- 2. the aggregate on the broker

    def _exporters(self, ns: str, name: str, state: ExportState) -> list[ExportedServiceSpec]:
        """Every cluster's view of the service: ours as this pass computed it, the others' from the
        broker. A view counts only as its cluster publishes it: labelled with the cluster named in its
        spec (the admission policy lets a member write only views labelled with its own ID), under
        the canonical name, from a registered cluster."""
        out: list[ExportedServiceSpec] = []
        for obj in self.b_exports.cache.by_index(BY_SERVICE, f"{ns}/{name}"):
            spec = self._export_spec(obj)
            if (object_labels(obj).get(SOURCE_CLUSTER_LABEL) != spec.cluster
                    or object_name(obj) != broker_object_name(name, ns, spec.cluster)
                    or (spec.service_name, spec.service_namespace) != (name, ns)
                    or self.b_clusters.cache.get(f"{self.broker_ns}/{spec.cluster}") is None):
                continue
            if spec.cluster != self.cluster_id or state.hold:
                out.append(spec)
        if state.spec is not None:
            out.append(state.spec)  # what we just published, whether or not the cache has it yet
        return out

    def _derive(self, ns: str, name: str, state: ExportState) -> AggregateState:
        """The aggregated ServiceImport, as every reader derives it from the exporters' views (never
        stored on the broker: docs/discovery.md "Broker tenancy"). Empty while nobody exports the
        service, or no exporter has decided its VIP yet."""
        derived = derive(self._exporters(ns, name, state))
        if derived is None:
            return AggregateState()
        obj = broker_service_import(derived.result, service=name, namespace=ns, vip_enabled=derived.vip_enabled,
                                    allocated_by=derived.allocated_by)
        obj.metadata.namespace = self.broker_ns
        return AggregateState(current=obj, result=derived.result)

    # -- this cluster's EndpointSlice on the broker

    async def _sync_slice(self, ns: str, name: str, state: ExportState, agg: AggregateState) -> None:
        if state.spec is None or state.service is None:
            return
        use_pod_ips = state.type == ServiceImportType.HEADLESS or bool(agg.current and agg.current.spec.ips)
        if agg.current is None and not use_pod_ips:
            use_pod_ips = state.spec.clusterset_ip_enabled  # about to get a VIP: skip a ClusterIP round trip
        own = self.slices.cache.by_index(BY_KUBE_SERVICE, f"{ns}/{name}")
        desired = broker_slice(self.cluster_id, ns, state.service, own, use_pod_ips, selectors=state.selectors)
        assert desired.metadata is not None
        desired.metadata.namespace = self.broker_ns
        owner = self._cluster_owner()
        desired.metadata.ownerReferences = [owner] if owner else None
        current = self.b_slices.cache.get(f"{self.broker_ns}/{desired.metadata.name}")
        if current is None or _slice_body(current) != _slice_body(desired):
            key = f"slice/{desired.metadata.name}"
            if self._published.get(key) == _slice_body(desired):
                return  # written already; the cache has not shown it yet
            await helpers.apply_quiet(self.broker, desired, field_manager=AGENT_FIELD_MANAGER, force=True)
            self._published[key] = _slice_body(desired)

    # -- 3. conditions on the ServiceExport

    async def _sync_conditions(self, state: ExportState, agg: AggregateState) -> None:
        export = state.export
        if export is None:
            return
        gen = export.metadata.generation
        conds: list[Condition] = [new_condition(ConditionType.VALID, state.valid or False,
                                                state.reason if not state.hold else ValidReason.INVALID_ANNOTATION,
                                                state.message, gen)]
        failure = state.failure or agg.failure
        exported = bool(agg.current and any(c.cluster == self.cluster_id for c in agg.current.status.clusters))
        if failure:
            conds.append(new_condition(ConditionType.READY, False, ReadyReason.FAILED, failure, gen))
        elif state.valid and exported:
            conds.append(new_condition(ConditionType.READY, True, ReadyReason.EXPORTED,
                                       "the service is exported to the clusterset", gen))
        elif state.valid:
            conds.append(new_condition(ConditionType.READY, False, ReadyReason.PENDING,
                                       state.pending or "waiting for the broker to aggregate the export", gen))
        else:
            conds.append(new_condition(ConditionType.READY, False, ReadyReason.PENDING,
                                       f"not exported: {state.message}", gen))
        conflicts = agg.result.conflicts if (agg.result and state.valid and exported) else []
        conds.append(conflict_condition(conflicts, gen))
        merged = merge_conditions(export.status.conditions, conds)
        if _conditions_key(merged) == _conditions_key(export.status.conditions):
            return
        raw = self.exports.cache.get(f"{export.metadata.namespace}/{export.metadata.name}")
        if raw is not None:
            for kind, reason, message in _condition_events(export.status.conditions, merged):
                self.recorder.event(raw, kind, reason, message)
        # A copy: the parsed export is shared (_parsed) and stays what the cache holds.
        written = export.model_copy(update={"status": export.status.model_copy(update={"conditions": merged})})
        try:
            await helpers.patch_status_quiet(self.cluster, written, field_manager=AGENT_FIELD_MANAGER,
                                             patch_type=PatchType.MERGE)
        except ApiError as e:
            if not helpers.is_not_found(e):  # deleted meanwhile: nothing to report on
                raise

    # -- 4. the local ServiceImport and the other clusters' EndpointSlices

    def _sources_for_us(self, ns: str, name: str, state: ExportState) -> set[str]:
        """The exporting clusters whose export this cluster may import: those without a consumer list
        and those whose list names us (a MultiClusterService's consumerClusters, docs/mcsvc.md)."""
        consumers: dict[str, list[str] | None] = {}
        for o in self.b_exports.cache.by_index(BY_SERVICE, f"{ns}/{name}"):
            spec = self._export_spec(o)
            consumers[spec.cluster] = spec.consumer_clusters
        if state.spec is not None:
            consumers[self.cluster_id] = state.spec.consumer_clusters
        return {c for c, allowed in consumers.items() if allowed is None or self.cluster_id in allowed}

    async def _sync_import(self, ns: str, name: str, agg: ServiceImport | None,
                           sources: set[str] | None = None) -> None:
        ns_obj = self.namespaces.cache.get(ns)
        if ns_obj is None:
            return  # creating namespaces is not the agent's job; the Namespace watch brings us back
        if _terminating(ns_obj):
            return  # kube refuses new objects there; the Namespace watch brings us back if it returns
        hidden: set[str] = set()
        if agg is not None and sources is not None:
            allowed = [c for c in agg.status.clusters if c.cluster in sources]
            hidden = {c.cluster for c in agg.status.clusters} - sources
            if not allowed:
                agg = None  # no exporter lets this cluster import the service: no import here
            elif hidden:
                agg = agg.model_copy(deep=True)
                agg.status.clusters = allowed
        try:
            await self._sync_import_in(ns, name, agg, hidden)
        except ApiError as e:
            if not helpers.is_namespace_terminating(e):
                raise
            # Deleted between our cache read and the write: expected, and the namespace's deletion
            # removes what we made there.
            log.debug("%s/%s: namespace is being deleted; not importing", ns, name)

    def _importable(self, b: Any, ns: str, name: str, agg: ServiceImport) -> str | None:
        """Why a broker slice must not be imported (None: import it).

        Anyone holding a broker credential can write slices there, so a slice is trusted only when it
        is the one its source cluster publishes: a registered `Cluster`, listed in the aggregate, under
        the canonical name, owned by that `Cluster`. Silent clusters' slices are withdrawn.
        """
        cluster = object_labels(b).get(SOURCE_CLUSTER_LABEL) or ""
        registered = self.b_clusters.cache.get(f"{self.broker_ns}/{cluster}") if cluster else None
        if registered is None:
            return "unregistered-cluster"
        if cluster not in {c.cluster for c in agg.status.clusters}:
            return "not-in-aggregate"
        if object_name(b) != broker_object_name(name, ns, cluster) or _uid(registered) not in _owner_uids(b):
            return "not-canonical"
        if cluster in self._silent:
            return "silent-cluster"
        return None

    def _note_ignored(self, b: Any, reason: str) -> None:
        if reason != "silent-cluster":  # withdrawn, not suspicious: logged once per cluster elsewhere
            IGNORED_SLICES.labels(reason).inc()
            seen = (f"{object_name(b)}@{_dump(b).get('metadata', {}).get('resourceVersion')}", reason)
            if seen not in self._ignored_logged:
                if len(self._ignored_logged) > 10_000:
                    self._ignored_logged.clear()
                self._ignored_logged.add(seen)
                log.warning("not importing broker EndpointSlice %s (source cluster %r): %s", object_name(b),
                            object_labels(b).get(SOURCE_CLUSTER_LABEL), _IGNORED_WHY[reason])

    async def _sync_import_in(self, ns: str, name: str, agg: ServiceImport | None,
                              hidden: set[str] | None = None) -> None:
        local_raw = self.imports.cache.get(f"{ns}/{name}")
        local = ServiceImport.from_dict(local_raw) if local_raw is not None else None
        copies = {object_name(o): o for o in self.slices.cache.by_index(BY_SERVICE, f"{ns}/{name}")
                  if object_labels(o).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE and object_namespace(o) == ns}
        if agg is None:
            for slice_name in copies:
                await helpers.ensure_deleted(self.cluster, EndpointSlice, slice_name, namespace=ns)
            if local is not None:
                await helpers.ensure_deleted(self.cluster, ServiceImport, name, namespace=ns)
            return
        labels, annotations = local_import_metadata(agg)
        if local is None:
            local = await _write(self.cluster, local_service_import(agg, namespace=ns, service=name), replace=False)
        elif (local.spec != agg.spec or (local.metadata.labels or None) != labels
              or (local.metadata.annotations or None) != annotations):
            desired = local_service_import(agg, namespace=ns, service=name)
            desired.metadata.resource_version = local.metadata.resource_version
            local = await _write(self.cluster, desired, replace=True)
        if local.status.clusters != agg.status.clusters:
            local.status = ServiceImportStatus(clusters=agg.status.clusters, conditions=local.status.conditions)
            await helpers.patch_status_quiet(self.cluster, local, field_manager=AGENT_FIELD_MANAGER,
                                             patch_type=PatchType.MERGE)  # only its uid is read below
        uid = local.metadata.uid or ""
        wanted: set[str] = set()
        for b in self.b_slices.cache.by_index(BY_SERVICE, f"{ns}/{name}"):
            # Our own slice too: every cluster that imports a service, the exporter included, has MCS
            # EndpointSlices for it (KEP-1645); dns and the proxy read their own cluster from kube's.
            cluster = object_labels(b).get(SOURCE_CLUSTER_LABEL) or ""
            if hidden and cluster in hidden:
                continue  # its export names consumers, and this cluster is not one of them
            why = self._importable(b, ns, name, agg)
            if why is not None:
                self._note_ignored(b, why)
                continue
            copy_name = imported_slice_name(name, cluster)
            wanted.add(copy_name)
            existing = copies.get(copy_name)
            if existing is not None and _copy_current(existing, b, uid, name, cluster):
                continue
            copy = local_slice_copy(b, ns, name, cluster, uid, name)
            if existing is None or _slice_body(existing) != _slice_body(copy) or _owner_uids(existing) != {uid}:
                await helpers.apply_quiet(self.cluster, copy, field_manager=AGENT_FIELD_MANAGER, force=True)
        for slice_name in copies.keys() - wanted:
            await helpers.ensure_deleted(self.cluster, EndpointSlice, slice_name, namespace=ns)


async def _write(client: AsyncClient, obj: ServiceImport, *, replace: bool) -> ServiceImport:
    """Create or replace (with the object's resourceVersion) one of our models; returns what is stored."""
    write = helpers.replace if replace else helpers.create
    return await write(client, obj, field_manager=AGENT_FIELD_MANAGER)


def _slice_body(obj: Any) -> tuple[Any, ...]:
    d = _dump(obj)
    return (d.get("addressType"), d.get("endpoints") or [], d.get("ports") or [],
            (d.get("metadata") or {}).get("labels") or {})


def _share_lists(obj: Any, cached: Any) -> None:
    """`obj`, about to be cached, takes `cached`'s endpoints and ports where they are equal:
    cached objects are read-only, so one instance may serve both."""
    if obj.endpoints and obj.endpoints is not cached.endpoints and obj.endpoints == cached.endpoints:
        obj.endpoints = cached.endpoints
    if obj.ports and obj.ports is not cached.ports and obj.ports == cached.ports:
        obj.ports = cached.ports


def _copy_current(existing: Any, broker: Any, uid: str, service: str, cluster: str) -> bool:
    """A cheap check that a local slice copy already matches its broker slice (owner, labels and
    body), on the cached structs without building the copy: true only when the full comparison
    (_slice_body of `local_slice_copy`) would find nothing to write either."""
    meta = existing.metadata
    refs = meta.ownerReferences or []
    return (len(refs) == 1 and refs[0].uid == uid and existing.endpoints == broker.endpoints
            and existing.ports == broker.ports and existing.addressType == (broker.addressType or "IPv4")
            and meta.labels == {SERVICE_NAME_LABEL: service, SOURCE_CLUSTER_LABEL: cluster,
                                MANAGED_BY_LABEL: MANAGED_BY_VALUE})


_IGNORED_WHY = {
    "unregistered-cluster": "no such Cluster is registered on the broker",
    "not-in-aggregate": "the cluster is not listed in the aggregated ServiceImport's status.clusters",
    "not-canonical": "its name or owner is not the one its cluster publishes",
}


def _uid(obj: Any) -> str:
    return str((_dump(obj).get("metadata") or {}).get("uid") or "")


def _terminating(ns_obj: Any) -> bool:
    d = _dump(ns_obj)
    return bool((d.get("metadata") or {}).get("deletionTimestamp")) or (d.get("status") or {}).get("phase") == "Terminating"


def _owner_uids(obj: Any) -> set[str]:
    return {r.get("uid", "") for r in (_dump(obj).get("metadata") or {}).get("ownerReferences") or []}


def _condition_events(before: list[Condition] | None, after: list[Condition]) -> list[tuple[str, str, str]]:
    """The Events a ServiceExport's condition change deserves: a Warning when a problem appears (or
    changes), a Normal one when it clears or the export first becomes ready."""
    out: list[tuple[str, str, str]] = []

    def pair(type_: str) -> tuple[Condition | None, Condition | None]:
        return find_condition(before, type_), find_condition(after, type_)

    old, new = pair(ConditionType.VALID)
    if new is not None and str(new.status) == "False" and (old is None or (old.status, old.reason, old.message)
                                                             != (new.status, new.reason, new.message)):
        out.append((WARNING, new.reason, new.message))
    elif new is not None and str(new.status) == "True" and old is not None and str(old.status) == "False":
        out.append((NORMAL, new.reason, "the export is valid again"))
    old, new = pair(ConditionType.READY)
    if new is not None and new.reason == ReadyReason.FAILED and (old is None or old.message != new.message):
        out.append((WARNING, new.reason, new.message))
    elif new is not None and str(new.status) == "True" and (old is None or str(old.status) != "True"):
        out.append((NORMAL, new.reason, new.message))
    old, new = pair(ConditionType.CONFLICT)
    if new is not None and str(new.status) == "True" and (old is None or (old.status, old.reason, old.message)
                                                            != (new.status, new.reason, new.message)):
        out.append((WARNING, new.reason, new.message))
    elif new is not None and str(new.status) == "False" and old is not None and str(old.status) == "True":
        out.append((NORMAL, ConflictReason.NO_CONFLICTS, f"conflict resolved (was: {old.reason})"))
    return out


def _conditions_key(conds: list[Condition] | None) -> list[tuple[str, str, str, str, int | None]]:
    return sorted((c.type, str(c.status), c.reason, c.message, c.observed_generation) for c in conds or [])


__all__ = ["Agent", "AgentConfigError"]
