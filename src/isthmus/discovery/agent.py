"""The discovery agent: exports this cluster's services to the broker and imports everyone's.

This module wires the flows together; each flow is its own module:

- exports.py: this cluster's view of each exported service on the broker (ExportedService +
  EndpointSlice), or its withdrawal, and the ServiceExport's conditions;
- aggregates.py: the aggregated ServiceImport every agent derives from the exporters' views, and
  the service's VIP (decided, allocated from this cluster's CIDR, held, released);
- imports.py: the local ServiceImport and the EndpointSlices of every exporting cluster next to it;
- heartbeat.py: this agent's heartbeat on its broker `Cluster` and its verdict on the peers'.

They share one informer context (caches.py), built at each leadership term of the agent's
`runtime.Manager` (which owns the Lease, the informers' start and stop, and readiness: this module
only wires, in `_wire`), and one controller, keyed by service ("<namespace>/<name>"),
level-triggered: whatever changed — the ServiceExport, the Service, its EndpointSlices, another
cluster's export on the broker, a namespace appearing — the agent re-reads everything it knows
about that service from its caches and converges four things, in order:

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
endpoints.py, allocator.py), so the flows only read caches and write differences.
"""

from __future__ import annotations

import base64
import logging
import random
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Secret

from isthmus.api.mcs import (
    AGENT_FIELD_MANAGER,
    AGENT_LEASE_NAME,
    AGENT_NAMESPACE,
    BROKER_SECRET_KEY,
    BROKER_SECRET_NAME,
    DEFAULT_DEAD_CLUSTER_GRACE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_DISCOVERY_NAME,
    ServiceDiscovery,
    ServiceDiscoverySpec,
)
from isthmus.clusterset.about import ClusterIdentityError, check_cluster_identity
from isthmus.clusterset.brokerinfo import BROKER_TIMEOUT, BrokerInfo
from isthmus.discovery import metrics
from isthmus.discovery.aggregates import AggregateState, Aggregator
from isthmus.discovery.allocator import VipAllocator
from isthmus.discovery.caches import BY_SOURCE_CLUSTER, Caches, dump
from isthmus.discovery.errors import AgentConfigError, AgentNotJoined, BrokerCredentialsRejected
from isthmus.discovery.exports import ExportPublisher, ExportState
from isthmus.discovery.heartbeat import Heartbeat, broker_server
from isthmus.discovery.imports import ImportSyncer
from isthmus.discovery.liveness import Liveness
from isthmus.kube import helpers, keys
from isthmus.runtime import (
    Controller,
    EventRecorder,
    Informer,
    LeaderElection,
    Manager,
    Result,
    Term,
    object_labels,
    object_name,
)

__all__ = ["Agent"]

log = logging.getLogger(__name__)

FAILED_RETRY_SECONDS = 5.0
IDENTITY_MISMATCH_REASON = "ClusterIDMismatch"


async def _check_identity(client: AsyncClient, sd: ServiceDiscovery, cluster_id: str) -> None:
    """Refuse to run when the About API's cluster.clusterset.k8s.io names another ID than the one
    joined: exports published and imports written under one ID while other tools read the other would
    mix two clusters' endpoints. The Event on the ServiceDiscovery is where `kubectl describe` looks;
    the pod's crash loop is the not-ready."""
    try:
        warning = await check_cluster_identity(client, cluster_id)
    except ClusterIdentityError as err:
        recorder = EventRecorder(client, AGENT_FIELD_MANAGER)
        await recorder.emit(sd.to_dict(), "Warning", IDENTITY_MISMATCH_REASON, str(err))
        await recorder.aclose()
        raise AgentConfigError(str(err)) from None
    if warning is not None:
        log.warning("%s", warning)


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
        self.recorder = EventRecorder(cluster, AGENT_FIELD_MANAGER)
        self.broker_recorder = EventRecorder(broker, f"{AGENT_FIELD_MANAGER}/{cluster_id}")
        self.liveness = Liveness(dead_cluster_grace)
        self.heartbeat = Heartbeat(broker=broker, cluster_id=cluster_id, broker_ns=self.broker_ns,
                                   liveness=self.liveness, recorder=self.broker_recorder)
        self.aggregator = Aggregator(cluster_id=cluster_id, cidrs=discovery.clusterset_ip_cidr)
        self.publisher = ExportPublisher(cluster=cluster, broker=broker, cluster_id=cluster_id,
                                         clusterset_ip_enabled=discovery.clusterset_ip_enabled,
                                         aggregator=self.aggregator, recorder=self.recorder)
        self.importer = ImportSyncer(cluster=cluster, cluster_id=cluster_id, silent=lambda: self.heartbeat.silent)
        self.manager = Manager("agent", election=LeaderElection(
            cluster, AGENT_LEASE_NAME, AGENT_NAMESPACE, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period))
        self.manager.setup(self._wire)
        self.manager.on_exit(self.recorder.aclose)
        self.manager.on_exit(self.broker_recorder.aclose)
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
        await _check_identity(client, sd, cluster_id)
        raw = (secret.data or {}).get(BROKER_SECRET_KEY)
        if not raw:
            raise AgentConfigError(f"secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} has no {BROKER_SECRET_KEY!r}")
        info = BrokerInfo.decode(base64.b64decode(raw).decode())
        return cls(cluster=client, broker=info.client(timeout=BROKER_TIMEOUT), cluster_id=cluster_id,
                   discovery=sd.spec, **kwargs)

    # ------------------------------------------------------------------ what others read (discovery/metrics.py, tests)

    async def wait_ready(self) -> None:
        """Returns once this agent leads, its caches are synced and its VIP allocator is rebuilt."""
        await self.manager.wait_ready()

    @property
    def ready(self) -> bool:
        return self.manager.ready

    @property
    def allocator(self) -> VipAllocator | None:
        """This cluster's VIP allocator (aggregates.py keeps it)."""
        return self.aggregator.allocator

    @property
    def silent_peers(self) -> frozenset[str]:
        """The peers whose endpoints this agent withholds now (discovery/metrics.py reports them)."""
        return self.heartbeat.silent

    def local_exports(self) -> list[Any]:
        return self.caches.exports.cache.list()

    def local_imports(self) -> list[Any]:
        return self.caches.imports.cache.list()

    def broker_clusters(self) -> list[Any]:
        return self.caches.b_clusters.cache.list()

    @property
    def slices(self) -> Informer[Any]:
        """This cluster's EndpointSlices as cached (this term)."""
        return self.caches.slices

    @property
    def b_slices(self) -> Informer[Any]:
        """The broker's EndpointSlices as cached (this term)."""
        return self.caches.b_slices

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Campaign for the Lease; while leading, run the controller. Never returns on its own."""
        try:
            await self.manager.run()
        except* BrokerCredentialsRejected as group:
            raise group.exceptions[0] from None

    def _wire(self, term: Term) -> None:
        """A leadership term: the caches, the flows over them, the controller (run by the Manager)."""
        log.info("agent %s leading", self.cluster_id)
        local = term.informers(self.cluster)  # synced first, then the broker's (reported while it is not)
        broker = term.informers(self.broker, while_unsynced=self._report_waiting_for_broker, every=BROKER_TIMEOUT)
        caches = self.caches = Caches(local, broker, self.broker_ns)
        # Thousands of services are normal; the queue's global limiter is for protecting the API
        # from retry storms, not for throttling the first sync.
        c = Controller(f"mcs-agent-{self.cluster_id}", self.reconcile, workers=self.workers, qps=500.0, burst=5000)
        self.importer.attach(caches)
        self.publisher.attach(caches)
        self.aggregator.attach(caches)
        self.heartbeat.attach(caches, c.enqueue)
        c.watch(caches.exports, keys.own_keys)
        c.watch(caches.services, keys.own_keys)
        c.watch(caches.slices, lambda o: keys.kube_slice_keys(o) + (
            keys.mcs_keys(o) if object_labels(o).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE else ()))
        c.watch(caches.imports, keys.own_keys)
        # At start every key comes from the imports and exports themselves: mapping each Namespace
        # to its keys (a scan of every cache per namespace) would only repeat them.
        c.watch(caches.namespaces, self._keys_in_namespace, initial=False)
        c.watch(caches.b_exports, keys.mcs_keys)
        c.watch(caches.b_slices, keys.mcs_keys)
        # Only our own Cluster object gates publishing (others leaving cascade through the broker's
        # GC of their ExportedServices); heartbeats touch only annotations, so spec changes, adds
        # and deletes are what count.
        c.watch(caches.b_clusters, self._own_cluster_keys, initial=False,
                predicate=lambda old, new: old is None or dump(old).get("spec") != dump(new).get("spec"))
        # A cluster registering or leaving changes whose slices may be imported.
        c.watch(caches.b_clusters, self._cluster_slice_keys,
                predicate=lambda old, new: old is None)
        term.on_synced(self._synced)
        term.on_stopped(self._stopped)
        term.add(c, self.heartbeat.run, self.heartbeat.judge)

    async def _synced(self) -> None:
        self.aggregator.rebuild()
        await self.heartbeat.start()
        allocator = self.allocator
        log.info("agent %s ready (VIP CIDR %s, %d in use)", self.cluster_id,
                 allocator.cidr if allocator else "none", allocator.used if allocator else 0)

    async def _stopped(self) -> None:
        self.heartbeat.detach()

    async def _report_waiting_for_broker(self) -> None:
        errors = {inf.last_error for inf in self.caches.broker.informers if inf.last_error}
        why = f"waiting for the broker at {broker_server(self.broker)}: " + ("; ".join(sorted(errors)) or "no answer yet")
        await self.publisher.report_waiting(why)

    # ------------------------------------------------------------------ key mapping

    def _keys_in_namespace(self, ns_obj: Any) -> list[str]:
        ns = object_name(ns_obj)
        return [k for k in self._all_keys() if keys.service_of(k)[0] == ns]

    def _own_cluster_keys(self, cluster_obj: Any) -> list[str]:
        if object_name(cluster_obj) != self.cluster_id:
            return []
        return sorted(k for o in self.caches.exports.cache.list() for k in keys.own_keys(o))

    def _cluster_slice_keys(self, cluster_obj: Any) -> list[str]:
        return sorted({k for o in self.caches.b_slices.cache.by_index(BY_SOURCE_CLUSTER, object_name(cluster_obj))
                       for k in keys.mcs_keys(o)})

    def _all_keys(self) -> list[str]:
        found: set[str] = set()
        for obj in self.caches.b_exports.cache.list():
            found.update(keys.mcs_keys(obj))
        for obj in self.caches.exports.cache.list():
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
        publisher = self.publisher
        try:
            await publisher.sync_export(ns, name, state)  # 1.
            if state.published:
                # Aggregate on the pass this creation brings back (see the module's docstring). Its
                # event always comes: had the broker held the view already, the cache would lag it
                # and the view's ADDED event would still be on its way.
                await publisher.sync_slice(ns, name, state, self.aggregator.derive(ns, name, state.spec, state.hold))
                return None
            agg = self.aggregator.derive(ns, name, state.spec, state.hold)  # 2.
            await publisher.sync_slice(ns, name, state, agg)
        except (httpx2.TransportError, OSError) as e:
            # The broker is unreachable: still tell the user where the export stands, then retry.
            self.liveness.link_failed()
            state.pending = f"waiting for the broker: {helpers.describe_error(e)}"
            await publisher.sync_conditions(state, AggregateState())
            raise
        await publisher.sync_conditions(state, agg)  # 3.
        await self.importer.sync(ns, name, agg.current, self.importer.sources_for_us(ns, name, state.spec),
                                 agg.result.served if agg.result is not None else None)  # 4.
        if state.failure or agg.failure:
            return Result(requeue_after=FAILED_RETRY_SECONDS)  # e.g. a full CIDR: a VIP may free up
        return None
