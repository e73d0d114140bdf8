"""The broker side of exposure, `isthmus mcsvc-broker`: leader-elected, one per broker.

Keyed by `<namespace>/<name>` of the MultiClusterService. A reconcile:

- holds the finalizer while the object lives; on delete it removes the load balancer and waits
  until every live member cluster removed its report (= what it made there), then lets go;
- warns `ClusterNotFound` once per unknown cluster name (ignored otherwise, the seed's rule);
- for LoadBalancer, hands the provider the collected backends of the provider clusters
  (Get → Ensure or Update); when LoadBalancer leaves `types`, EnsureDeleted;
- writes status, alone (docs/mcsvc.md "Broker tenancy"): `loadBalancer`, the members' reports
  (their MultiClusterServiceReports, copied into `status.clusters`), the conditions summarised from
  them (plan.py), the resolved providers/consumers and the address (printer columns). Any other
  write to the status is undone at the next reconcile, which a status change triggers: members
  may not write it (RBAC), and an admin's edit does not survive either.

A member cluster that is registered but silent (no heartbeat for `grace`) does not hold a delete
up: its controller removes its leftovers when it comes back (orphan sweep at start).

Built on `runtime.Manager` (the Lease, each term's informers, readiness, the Lease handed back on
stop). The metrics collector (metrics.py) reads it through `metrics.MultiClusterServices`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.base import merge_conditions
from isthmus.api.mcs import HEARTBEAT_ANNOTATION, SOURCE_CLUSTER_LABEL, Cluster
from isthmus.api.mcsvc import (
    BROKER_FIELD_MANAGER,
    BROKER_LEASE,
    CONTROLLER_NAMESPACE,
    FINALIZER,
    SLICE_MANAGED_BY_LABEL,
    SLICE_MANAGED_BY_VALUE,
    ClusterReport,
    EventReason,
    ExposureType,
    LoadBalancerStatus,
    MultiClusterService,
    MultiClusterServiceReport,
    named_consumers,
    named_providers,
    report_name,
    resolve,
)
from isthmus.exposure import metrics
from isthmus.exposure.plan import backends, made_for, resolve_providers, show_clusters, summarize
from isthmus.exposure.provider import MCSLoadBalancer, ProviderError
from isthmus.kube import helpers, keys
from isthmus.kube.resources import resource_for
from isthmus.runtime import (
    Controller,
    EventRecorder,
    LeaderElection,
    Manager,
    Result,
    Term,
    object_labels,
    object_name,
)

log = logging.getLogger(__name__)

MCSResource: Any = resource_for(MultiClusterService)
ReportResource: Any = resource_for(MultiClusterServiceReport)
DEFAULT_GRACE = 60.0
RETRY_SECONDS = 5.0
DELETE_POLL = 1.0
REPORT_BATCH = 0.2
BY_MCS = "multiclusterservice"


def _key(obj: Any) -> list[str]:
    return list(keys.own_keys(obj))


def _relevant(obj: Any) -> tuple[Any, ...]:
    """What makes a reconcile due at once: spec and metadata (its own status writes are not)."""
    d = cast(dict[str, Any], obj.to_dict())
    meta = d.get("metadata") or {}
    return (d.get("spec"), meta.get("generation"), meta.get("annotations"), meta.get("deletionTimestamp"),
            meta.get("finalizers"))


def _status(obj: Any) -> Any:
    return cast(dict[str, Any], obj.to_dict()).get("status")


class BrokerController:
    def __init__(
        self,
        client: AsyncClient,
        provider: MCSLoadBalancer,
        *,
        broker_namespace: str,
        identity: str,
        grace: float = DEFAULT_GRACE,
        workers: int = 4,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.client = client
        self.provider = provider
        self.broker_ns = broker_namespace
        self.grace = grace
        self.workers = workers
        self.recorder = EventRecorder(client, BROKER_FIELD_MANAGER, instance=identity)
        self.manager = Manager("mcsvc-broker", election=LeaderElection(
            client, BROKER_LEASE, CONTROLLER_NAMESPACE, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period))
        self.manager.setup(self._wire)
        self.manager.on_exit(self.recorder.aclose)
        self._warned: dict[str, tuple[str, ...]] = {}
        self._lb_problem: dict[str, str] = {}
        self._summaries: dict[str, tuple[str, int]] = {}
        """UID → (the status this controller last wrote, the resourceVersion of that write): while the
        cache shows an older version, the same write is not sent again."""
        self._lb: dict[str, LoadBalancerStatus | None] = {}
        """UID → what the provider last answered (never the object's status: that may be forged)."""
        self._finalized: set[str] = set()
        """UIDs this controller gave its finalizer (until the object is gone)."""
        self._beats: dict[str, tuple[str, float]] = {}
        """cluster → (last heartbeat value seen, monotonic time it changed)."""
        metrics.track(self)

    @property
    def ready(self) -> bool:
        """Leading, caches synced."""
        return self.manager.ready

    async def run(self) -> None:
        await self.manager.run()

    def _wire(self, term: Term) -> None:
        factory = term.informers(self.client)
        self.mcs = factory.informer(MCSResource)
        self.clusters = factory.informer(resource_for(Cluster), self.broker_ns)
        self.collected = factory.informer(EndpointSlice, self.broker_ns,
                                          labels={SLICE_MANAGED_BY_LABEL: SLICE_MANAGED_BY_VALUE})
        self.reports = factory.informer(ReportResource, self.broker_ns)
        self.reports.add_indexer(BY_MCS, made_for)
        c = Controller("mcsvc-broker", self.reconcile, workers=self.workers, qps=500.0, burst=5000)
        c.watch(self.mcs, _key, predicate=lambda old, new: old is None or _relevant(old) != _relevant(new))
        # A status change: its own write (the reconcile then finds nothing to do) or anyone else's,
        # which it undoes.
        self.mcs.add_handler(on_update=lambda old, new: c.enqueue_after(_key(new)[0], REPORT_BATCH)
                             if _relevant(old) == _relevant(new) and _status(old) != _status(new) else None)
        # Members' reports arrive in bursts (every cluster answers the same change): summarise them
        # once, a moment later, rather than once per report.
        def batch(obj: Any) -> None:
            for k in made_for(obj):
                c.enqueue_after(k, REPORT_BATCH)

        self.reports.add_handler(on_add=batch, on_update=lambda _o, n: batch(n), on_delete=batch)
        self.collected.add_indexer(BY_MCS, made_for)
        c.watch(self.collected, made_for)
        c.watch(self.clusters, lambda _o: self._all_keys(),
                predicate=lambda old, new: old is None or object_name(old) != object_name(new))
        self.mcs.add_handler(on_delete=self._forget)
        for informer, keyfn in self.provider.watches(factory):
            c.watch(informer, keyfn)
        self.controller = c
        term.add(c, lambda: self._watch_liveness(c))
        term.on_synced(self._synced)

    async def _synced(self) -> None:
        log.info("mcsvc-broker leading (provider %s)", self.provider.name)

    async def _watch_liveness(self, c: Controller) -> None:
        """A provider cluster that falls silent leaves the load balancers' backends (its pods are
        likely gone with it) and comes back when it beats again: time-based, hence a loop."""
        known = self._live()
        while True:
            await asyncio.sleep(max(0.2, self.grace / 4))
            live = self._live()
            if live != known:
                for name in sorted(known - live):
                    log.warning("cluster %s: no heartbeat for %.0f s: its endpoints leave every load balancer",
                                name, self.grace)
                known = live
                for o in self.mcs.cache.list():
                    if ExposureType.LOAD_BALANCER.value in ((o.to_dict().get("spec") or {}).get("types") or []):
                        c.enqueue(_key(o)[0])

    def _forget(self, obj: Any) -> None:
        uid = (cast(dict[str, Any], obj.to_dict()).get("metadata") or {}).get("uid") or ""
        self._summaries.pop(uid, None)
        self._lb.pop(uid, None)
        self._finalized.discard(uid)

    def _all_keys(self) -> list[str]:
        return sorted({k for o in self.mcs.cache.list() for k in _key(o)})

    def _live(self) -> set[str]:
        """Registered clusters whose heartbeat changed within the grace, as this controller saw it
        (its own monotonic clock: clock skew between hosts cannot matter)."""
        now = time.monotonic()
        live = set()
        for raw in self.clusters.cache.list():
            name = object_name(raw)
            beat = ((cast(Any, raw).to_dict().get("metadata") or {}).get("annotations") or {}).get(
                HEARTBEAT_ANNOTATION, "")
            seen = self._beats.get(name)
            if seen is None or seen[0] != beat:
                self._beats[name] = (beat, now)
                seen = self._beats[name]
            if now - seen[1] <= self.grace:
                live.add(name)
        return live

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        try:
            return await self._reconcile(key)
        except ApiError as e:
            if helpers.is_conflict(e):
                return Result(requeue_after=0.05)
            raise

    async def _reconcile(self, key: str) -> Result | None:
        ns, name = keys.service_of(key)
        raw = self.mcs.cache.get(key)
        if raw is None:
            self._warned.pop(key, None)
            self._lb_problem.pop(key, None)
            return None
        mcs = MultiClusterService.from_dict(raw)
        if mcs.deleting:
            return await self._finalize(mcs, raw)
        if FINALIZER not in (mcs.metadata.finalizers or []) and mcs.metadata.uid not in self._finalized:
            fresh = await self._add_finalizer(mcs)
            if fresh is None:
                return None  # deleted meanwhile
            mcs = fresh
        registered = [object_name(o) for o in self.clusters.cache.list()]
        reports = self._reports_of(mcs, set(registered))
        live = self._live()
        providers = resolve_providers(mcs, registered, reports, live)
        consumers, unknown_c = resolve(named_consumers(mcs), registered)
        unknown = tuple(sorted(set(providers.unknown) | set(unknown_c)))
        if unknown and self._warned.get(key) != unknown:
            self.recorder.warning(raw, EventReason.CLUSTER_NOT_FOUND,
                                  f"cluster(s) {', '.join(unknown)} not found in the clusterset: ignored "
                                  f"(registered: {', '.join(sorted(registered)) or 'none'})")
        self._warned[key] = unknown

        lb_status, problem = await self._load_balancer(mcs, raw, providers.clusters, live)
        conditions = summarize(mcs, providers, consumers, lb_status, problem, reports=reports)
        wanted = {c.type for c in conditions}
        merged = merge_conditions([c for c in mcs.status.conditions if c.type in wanted], conditions)
        lb_dict = lb_status.to_dict() if lb_status is not None and lb_status.ingress else None
        desired: dict[str, Any] = {
            "conditions": [c.to_dict() for c in merged],
            "loadBalancer": lb_dict,
            "providers": show_clusters(providers.clusters, named_providers(mcs)),
            "consumers": show_clusters(consumers, named_consumers(mcs)) if mcs.has_type(
                ExposureType.CROSS_CLUSTER) else None,
            "address": ",".join(i.ip or i.hostname or "" for i in (lb_status.ingress if lb_status else None) or [])
            or None,
            "observedGeneration": mcs.metadata.generation,
            "clusters": [r.to_dict() for r in reports],
        }
        current = _status(raw) or {}
        # The whole status is this controller's: every field it does not set is cleared (null in a
        # merge patch), so nothing another writer added survives either.
        status = {k: v for k, v in desired.items() if (current.get(k) or None) != (v or None)}
        status.update({k: None for k in current if k not in desired})
        uid = mcs.metadata.uid or ""
        written = json.dumps(desired, sort_keys=True)
        last = self._summaries.get(uid)
        if status and last is not None and last[0] == written and _rv(raw) <= last[1]:
            status = {}  # this very status is written, and nobody wrote since (or the cache lags)
        if status:
            # Only this controller writes the status, so no resourceVersion: a summary of a report that
            # is already stale is corrected by the reconcile the newer report triggers.
            stored = await cast(Any, self.client).patch(
                MCSResource.Status, name, {"status": status},
                namespace=ns, patch_type=PatchType.MERGE, field_manager=BROKER_FIELD_MANAGER)
            self._summaries[uid] = (written, _rv(stored))
        return Result(requeue_after=RETRY_SECONDS) if problem else None

    def _reports_of(self, mcs: MultiClusterService, registered: set[str]) -> list[ClusterReport]:
        """The member reports on `mcs`, sorted by cluster: only those a registered cluster wrote about
        this very object, under the one name that cluster's controller uses (the admission policy lets
        a member write only reports labelled with its own cluster ID)."""
        ns, name = mcs.namespace or "", mcs.name
        out: dict[str, ClusterReport] = {}
        for raw in self.reports.cache.by_index(BY_MCS, f"{ns}/{name}"):
            cluster = object_labels(raw).get(SOURCE_CLUSTER_LABEL, "")
            if cluster not in registered or object_name(raw) != report_name(ns, name, cluster):
                continue
            try:
                report = MultiClusterServiceReport.from_dict(cast(Any, raw).to_dict())
            except ValueError:
                continue
            spec = report.spec
            target = spec.multi_cluster_service
            if (spec.cluster != cluster or spec.report.name != cluster or (target.namespace, target.name) != (ns, name)
                    or (target.uid and mcs.metadata.uid and target.uid != mcs.metadata.uid)):
                continue
            out[cluster] = spec.report
        return [out[c] for c in sorted(out)]

    async def _add_finalizer(self, mcs: MultiClusterService) -> MultiClusterService | None:
        """Add the finalizer, resourceVersion-checked; a busy broker's watch may lag behind, so a 409 is
        answered by reading the object afresh, not by waiting for the cache. Remembered by UID, so a
        stale cache does not make it add the finalizer twice."""
        for _ in range(5):
            if FINALIZER in (mcs.metadata.finalizers or []):
                break
            try:
                stored = await cast(Any, self.client).patch(
                    MCSResource, mcs.name, {"metadata": {"finalizers": [*(mcs.metadata.finalizers or []), FINALIZER],
                                                         "resourceVersion": mcs.metadata.resource_version}},
                    namespace=mcs.namespace, patch_type=PatchType.MERGE, field_manager=BROKER_FIELD_MANAGER)
                mcs = MultiClusterService.from_dict(stored.to_dict())
            except ApiError as e:
                if not helpers.is_conflict(e):
                    raise
                fresh = await helpers.get_or_none(self.client, MultiClusterService, mcs.name, namespace=mcs.namespace)
                if fresh is None or fresh.deleting:
                    return None
                mcs = fresh
        self._finalized.add(mcs.metadata.uid or "")
        return mcs

    async def _load_balancer(self, mcs: MultiClusterService, raw: Any, providers: list[str],
                             live: set[str]) -> tuple[LoadBalancerStatus | None, str | None]:
        key = f"{mcs.namespace}/{mcs.name}"
        uid = mcs.metadata.uid or ""
        if not mcs.has_type(ExposureType.LOAD_BALANCER):
            _, exists = await self.provider.get(mcs)
            if exists or mcs.status.load_balancer is not None:
                await self.provider.ensure_deleted(mcs)  # idempotent; the status may outlive a provider's memory
                if exists:  # an address in the status alone may be anyone's write: no Event for it
                    self.recorder.normal(raw, EventReason.LB_DELETED,
                                         f"load balancer deleted ({self.provider.name}): LoadBalancer is no longer "
                                         "in spec.types")
            self._lb_problem.pop(key, None)
            self._lb.pop(uid, None)
            return None, None
        collected = [cast(Any, o).to_dict() for o in self.collected.cache.by_index(BY_MCS, key)]
        found = backends(collected, [p for p in providers if p in live])
        if not found.ports:  # nothing published yet: waiting, not failing (ServiceApplied says why)
            return await self._last_status(mcs), None
        try:
            _, exists = await self.provider.get(mcs)
            status = await (self.provider.update(mcs, found) if exists else self.provider.ensure(mcs, found))
        except ProviderError as e:
            message = f"{self.provider.name} load balancer: {e}"
            if self._lb_problem.get(key) != message:
                self.recorder.warning(raw, EventReason.LB_FAILED, message)
            self._lb_problem[key] = message
            return await self._last_status(mcs), message
        self._lb[uid] = status
        if self._lb_problem.pop(key, None) is not None or not exists:
            self.recorder.normal(raw, EventReason.LB_ENSURED,
                                 f"load balancer ensured ({self.provider.name}) over "
                                 f"{sum(len(v) for v in found.servers.values())} endpoints of "
                                 f"{', '.join(found.clusters) or 'no cluster yet'}")
        return status, None

    async def _last_status(self, mcs: MultiClusterService) -> LoadBalancerStatus | None:
        """What the provider last said, else what it says now: never read back from the object."""
        uid = mcs.metadata.uid or ""
        if uid not in self._lb:
            try:
                status, exists = await self.provider.get(mcs)
            except ProviderError:
                return None
            self._lb[uid] = status if exists else None
        return self._lb[uid]

    async def _finalize(self, mcs: MultiClusterService, raw: Any) -> Result | None:
        if FINALIZER not in (mcs.metadata.finalizers or []):
            return None
        try:
            await self.provider.ensure_deleted(mcs)
        except ProviderError as e:
            self.recorder.warning(raw, EventReason.LB_FAILED, f"cannot delete the load balancer: {e}")
            return Result(requeue_after=RETRY_SECONDS)
        live = self._live()
        key = f"{mcs.namespace}/{mcs.name}"
        pending = sorted({object_labels(o).get(SOURCE_CLUSTER_LABEL, "")
                          for o in self.reports.cache.by_index(BY_MCS, key)} & live)
        leftovers = sorted({object_labels(o).get(SOURCE_CLUSTER_LABEL, "")
                            for o in self.collected.cache.by_index(BY_MCS, key)} & live)
        if pending or leftovers:
            return Result(requeue_after=DELETE_POLL)  # members are removing what they made
        finalizers = [f for f in mcs.metadata.finalizers or [] if f != FINALIZER]
        try:
            await cast(Any, self.client).patch(
                MCSResource, mcs.name, {"metadata": {"finalizers": finalizers or None,
                                                     "resourceVersion": mcs.metadata.resource_version}},
                namespace=mcs.namespace, patch_type=PatchType.MERGE, field_manager=BROKER_FIELD_MANAGER)
        except ApiError as e:
            if not helpers.is_not_found(e):
                raise
        self.recorder.normal(raw, EventReason.CLEANED_UP, "every cluster removed what this object made")
        self._finalized.discard(mcs.metadata.uid or "")
        self._warned.pop(key, None)
        return None


def _rv(obj: Any) -> int:
    """resourceVersion as a number, to tell a later write from the cache catching up with ours (0 if
    a server's versions are not numbers: then every write is sent)."""
    try:
        return int((cast(dict[str, Any], obj.to_dict()).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0
