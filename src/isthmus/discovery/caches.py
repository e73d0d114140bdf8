"""The discovery agent's one informer context: the caches its flows share, and how they read them.

Built once per leadership term (agent.py) over two informer factories, this cluster's and the
broker's. Every flow (exports.py, aggregates.py, imports.py, heartbeat.py) reads these caches and
only these: no flow lists anything itself, except the heartbeat's read of the peers' Clusters
(heartbeat.py says why). The indexes filed here are the ones more than one flow reads.

Cached objects are shared and read-only. A cached ExportedService or ServiceExport is parsed into
its model once per cached object (`parsed`), whichever flow reads it first.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.base import Condition, KubeModel
from isthmus.api.mcs import (
    SOURCE_CLUSTER_LABEL,
    Cluster,
    ExportedService,
    ExportedServiceSpec,
    ServiceExport,
    ServiceImport,
)
from isthmus.kube import keys
from isthmus.kube.resources import resource_for
from isthmus.runtime import Informer, SharedInformerFactory, object_labels

__all__ = ["BY_KUBE_SERVICE", "BY_SERVICE", "BY_SOURCE_CLUSTER", "Caches", "annotations_of", "conditions_key", "dump",
           "slice_body"]

PARSE_MEMO_SIZE = 1024
_M = TypeVar("_M", bound=KubeModel)

# Index names.
BY_SERVICE = "service"  # "<ns>/<svc>" from the MCS labels (broker objects, our local slice copies)
BY_KUBE_SERVICE = "kube-service"  # "<ns>/<svc>" from kubernetes.io/service-name (kube's own slices)
BY_SOURCE_CLUSTER = "source-cluster"  # broker slices by the cluster they claim to come from
UNREAD_METADATA = frozenset({"uid", "creationTimestamp", "generation"})
"""Metadata the agent never reads from most of its caches (see `Caches`)."""


def _source_cluster_key(obj: Any) -> list[str]:
    cluster = object_labels(obj).get(SOURCE_CLUSTER_LABEL)
    return [cluster] if cluster else []


class Caches:
    """The informers of one leadership term: this cluster's (ServiceExports, Services, EndpointSlices,
    ServiceImports, Namespaces) and the broker's (ExportedServices, EndpointSlices, Clusters)."""

    def __init__(self, local: SharedInformerFactory, broker: SharedInformerFactory, broker_ns: str) -> None:
        self.local = local
        self.broker = broker
        self.broker_ns = broker_ns
        # At 10,000 services these caches hold 150,000 objects: they keep only the metadata the agent
        # reads (an export's uid, for its Events, and creation time, for conflicts; an import's uid,
        # owner of its slices, and generation, its Ready condition's observedGeneration; slices'
        # owners, checked before import).
        self.exports: Informer[Any] = local.informer(resource_for(ServiceExport))
        self.services: Informer[Any] = local.informer(Service, drop_metadata=UNREAD_METADATA)
        self.slices: Informer[Any] = local.informer(EndpointSlice, drop_metadata=UNREAD_METADATA)
        self.imports: Informer[Any] = local.informer(resource_for(ServiceImport),
                                                     drop_metadata=UNREAD_METADATA - {"uid", "generation"})
        self.namespaces: Informer[Any] = local.informer(Namespace)
        self.b_exports: Informer[Any] = broker.informer(resource_for(ExportedService), broker_ns,
                                                        drop_metadata=UNREAD_METADATA | {"ownerReferences"})
        self.b_slices: Informer[Any] = broker.informer(EndpointSlice, broker_ns, drop_metadata=UNREAD_METADATA)
        # Peers' heartbeat times are read in the broker's clock, from managedFields (heartbeat.py).
        self.b_clusters: Informer[Any] = broker.informer(resource_for(Cluster), broker_ns, keep_managed_fields=True)
        for inf in (self.slices, self.b_exports, self.b_slices):
            inf.add_indexer(BY_SERVICE, keys.mcs_keys)
        self.slices.add_indexer(BY_KUBE_SERVICE, keys.kube_slice_keys)
        self.b_slices.add_indexer(BY_SOURCE_CLUSTER, _source_cluster_key)
        self._parse_memo: dict[int, tuple[Any, KubeModel]] = {}

    def broker_cluster(self, name: str) -> Any:
        """The broker's `Cluster` `name` as cached (None: not registered)."""
        return self.b_clusters.cache.get(f"{self.broker_ns}/{name}")

    def export_spec(self, raw: Any) -> ExportedServiceSpec:
        """The spec of a cached ExportedService (see `parsed`): the spec alone is parsed, which is
        all that aggregation reads (half the cost of the whole object)."""
        spec = raw.get("spec") if isinstance(raw, dict) else None
        if not isinstance(spec, dict):
            return self.parsed(ExportedService, raw).spec  # the model says what is wrong with it
        return self.parsed(ExportedServiceSpec, spec)

    def parsed(self, model: type[_M], raw: Any) -> _M:
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


def dump(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if obj is not None else {}  # no typing.cast: it is a Python call, per object


def annotations_of(obj: Any) -> dict[str, str]:
    return cast(dict[str, str], (dump(obj).get("metadata") or {}).get("annotations") or {})


def slice_body(obj: Any) -> tuple[Any, ...]:
    """What of an EndpointSlice the agent writes (and so compares before writing)."""
    d = dump(obj)
    return (d.get("addressType"), d.get("endpoints") or [], d.get("ports") or [],
            (d.get("metadata") or {}).get("labels") or {})


def conditions_key(conds: list[Condition] | None) -> list[tuple[str, str, str, str, int | None]]:
    """Conditions as compared before a status write (order and transition times do not count)."""
    return sorted((c.type, str(c.status), c.reason, c.message, c.observed_generation) for c in conds or [])
