"""The `haproxy` provider: a MultiClusterService's load balancer is a `LoadBalancerPool` on the broker.

One pool per object (`mcs--<namespace>--<name>`, role slave_public: the broker's pool manager serves
it on its public address), one TCP frontend per exposed Service port bound to that port, and one
backend per port whose servers are the ready pod addresses (at the target port) of every provider
cluster — so one address balances across clusters and follows endpoint changes (the pool manager
applies server changes without a reload). It meets the pool manager only in the LoadBalancerPool
object (api/lb.py), never in code.

A port another MultiClusterService's pool already binds is refused with a ProviderError naming the
holder (two pools cannot bind one port of one address); UDP/SCTP ports are left out with a note
(HAProxy balances TCP).
"""

from __future__ import annotations

from typing import Any, cast

from lightkube import ApiError, AsyncClient

from isthmus.api.base import ObjectMeta
from isthmus.api.lb import (
    PUBLIC_ROLE,
    READY,
    BackendServer,
    HealthCheck,
    LinkBackend,
    LoadBalancerPool,
    LoadBalancerPoolSpec,
    PoolBackend,
    PoolFrontend,
    PoolHAProxy,
)
from isthmus.api.mcsvc import (
    BROKER_FIELD_MANAGER,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MCS_LABEL,
    MCS_NAMESPACE_LABEL,
    PERMANENT_ID_LABEL,
    LoadBalancerIngress,
    LoadBalancerStatus,
    MultiClusterService,
    PortStatus,
    pool_name,
)
from isthmus.exposure.plan import Backends, made_for
from isthmus.exposure.provider import KeyFunc, ProviderError, register
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from isthmus.runtime import Informer, SharedInformerFactory, object_labels, object_name

PoolResource: Any = resource_for(LoadBalancerPool)


def part_name(port: int, protocol: str) -> str:
    return f"port-{port}-{protocol.lower()}"


def pool_spec(backends: Backends) -> tuple[LoadBalancerPoolSpec, list[str]]:
    """The pool for these backends, and notes about ports left out."""
    frontends, parts, notes = [], [], []
    for name, port, proto in backends.ports:
        if proto != "TCP":
            notes.append(f"port {port}/{proto} is not exposed: HAProxy pools balance TCP only")
            continue
        part = part_name(port, proto)
        servers = sorted({(s.address, s.port) for s in backends.servers.get(name, [])})
        parts.append(PoolBackend(name=part, protocol="TCP",
                                 servers=[BackendServer(address=a, port=p) for a, p in servers],
                                 health_check=HealthCheck.for_port(name)))  # a frozen cluster's pods: skipped
        frontends.append(PoolFrontend(name=part, bind_port=port, protocol="TCP",
                                      link_backend=LinkBackend(default_backend=part)))
    spec = LoadBalancerPoolSpec(role=PUBLIC_ROLE, haproxy=PoolHAProxy(frontends=frontends, backends=parts))
    return spec, notes


def status_of(pool: LoadBalancerPool) -> LoadBalancerStatus:
    """The load balancer's status from the pool's: every serving address with its ports."""
    by_address: dict[str, list[PortStatus]] = {}
    for f in pool.status.frontends:
        for address in f.public_addresses or f.private_addresses:
            by_address.setdefault(address, []).append(PortStatus(port=f.port, protocol="TCP"))
    ingress = [LoadBalancerIngress(ip=a, ip_mode="Proxy", ports=sorted(p, key=lambda x: x.port))
               for a, p in sorted(by_address.items())]
    return LoadBalancerStatus(ingress=ingress or None)


class HAProxyLoadBalancer:
    name = "haproxy"

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.pools: Informer[Any] | None = None

    def watches(self, factory: SharedInformerFactory) -> list[tuple[Informer[Any], KeyFunc]]:
        self.pools = factory.informer(PoolResource, labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE})
        return [(self.pools, made_for)]

    def _cached(self, name: str) -> LoadBalancerPool | None:
        raw = self.pools.cache.get(name) if self.pools is not None else None
        return LoadBalancerPool.from_dict(raw) if raw is not None else None

    async def get(self, mcs: MultiClusterService) -> tuple[LoadBalancerStatus | None, bool]:
        pool = self._cached(pool_name(mcs.namespace or "", mcs.name))
        if pool is None:
            return None, False
        return self._ready_status(pool), True

    @staticmethod
    def _ready_status(pool: LoadBalancerPool) -> LoadBalancerStatus | None:
        ready = any(c.type == READY and c.status == "True" for c in pool.status.conditions)
        return status_of(pool) if ready or pool.status.ready_instances else LoadBalancerStatus()

    def _conflicts(self, mine: str, spec: LoadBalancerPoolSpec) -> list[str]:
        wanted = {f.bind_port for f in spec.haproxy.frontends}
        out = []
        for raw in self.pools.cache.list() if self.pools is not None else []:
            if object_name(raw) == mine:
                continue
            other = LoadBalancerPool.from_dict(raw)
            taken = wanted & {f.bind_port for f in other.spec.haproxy.frontends}
            if taken and other.spec.role == spec.role:
                holder = f"{object_labels(raw).get(MCS_NAMESPACE_LABEL)}/{object_labels(raw).get(MCS_LABEL)}"
                out.append(f"port {', '.join(map(str, sorted(taken)))} is already served by MultiClusterService "
                           f"{holder}'s load balancer (pool {object_name(raw)})")
        return out

    async def ensure(self, mcs: MultiClusterService, backends: Backends) -> LoadBalancerStatus:
        ns, name = mcs.namespace or "", mcs.name
        pname = pool_name(ns, name)
        spec, notes = pool_spec(backends)
        if not spec.haproxy.frontends:
            raise ProviderError("; ".join(notes) or "no port to expose yet: no provider cluster has published "
                                "the Service's endpoints (check ServiceApplied)")
        conflicts = self._conflicts(pname, spec)
        if conflicts:
            raise ProviderError("; ".join(conflicts) + ": expose other ports (spec.ports) or delete that one")
        labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, MCS_LABEL: name, MCS_NAMESPACE_LABEL: ns}
        if mcs.permanent_id:
            labels[PERMANENT_ID_LABEL] = mcs.permanent_id
        current = self._cached(pname)
        if current is None or current.spec.to_dict() != spec.to_dict() or (current.metadata.labels or {}) != labels:
            desired = LoadBalancerPool(metadata=ObjectMeta(name=pname, labels=labels), spec=spec)
            try:
                current = await helpers.apply(self.client, desired, field_manager=BROKER_FIELD_MANAGER, force=True)
            except ApiError as e:
                raise ProviderError(f"cannot write LoadBalancerPool {pname}: {helpers.describe_error(e)}; check "
                                    "that the LoadBalancerPool CRD is installed on the broker") from None
        return self._ready_status(current) or LoadBalancerStatus()

    async def update(self, mcs: MultiClusterService, backends: Backends) -> LoadBalancerStatus:
        return await self.ensure(mcs, backends)

    async def ensure_deleted(self, mcs: MultiClusterService) -> None:
        pname = pool_name(mcs.namespace or "", mcs.name)
        if self.pools is None or self.pools.cache.get(pname) is not None:
            await helpers.ensure_deleted(self.client, cast(Any, LoadBalancerPool), pname)


register("haproxy", HAProxyLoadBalancer)
