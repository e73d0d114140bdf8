"""Pool health, read from the pool manager's caches when scraped.

Per pool (bounded: pools are shared by many Services, tens to hundreds per cluster): the
instances it asks for and those serving its current generation (from the pool's status, which
every pool manager watches, so each replica reports the same figures: take `max by (pool)`), its
Ready condition, and whether the HAProxy this manager runs for it is up. No API request is made.

The collector reads the pool manager through `PoolsView`, which `manager.PoolManager` satisfies:
this module does not import it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from isthmus.api.lb import READY, InstanceState
from isthmus.runtime import REGISTRY
from isthmus.runtime.metrics import InformerView

__all__ = ["CLUSTERSET_METRICS", "PoolsView", "track"]

CLUSTERSET_METRICS = (
    "isthmus_pool_instances_desired",
    "isthmus_pool_instances_ready",
    "isthmus_pool_ready",
    "isthmus_pool_haproxy_up",
)
"""Every family this module exports (the dashboard test checks each is drawn)."""

class _ProcessView(Protocol):
    @property
    def running(self) -> bool: ...


class _InstanceView(Protocol):
    """One slot this manager runs: its HAProxy process and state."""

    @property
    def slot(self) -> int: ...

    @property
    def state(self) -> InstanceState: ...

    @property
    def instance(self) -> _ProcessView: ...


class PoolsView(Protocol):
    """What the collector reads of a pool manager: its pools' cache and its instances, while ready."""

    @property
    def ready(self) -> bool: ...

    @property
    def pools(self) -> InformerView: ...

    @property
    def running(self) -> Mapping[str, _InstanceView]: ...


_LIVE: weakref.WeakSet[PoolsView] = weakref.WeakSet()


def track(manager: PoolsView) -> None:
    """Report this manager's pools at every scrape once its caches are synced (held weakly)."""
    _LIVE.add(manager)


def _d(obj: Any) -> Mapping[str, Any]:
    return obj if isinstance(obj, dict) else obj.to_dict()


def pool_health(obj: Any) -> tuple[str, int, int, bool]:
    """(name, instances wanted, instances serving the current generation, Ready) of a pool."""
    d = _d(obj)
    status = d.get("status") or {}
    ready = any(c.get("type") == READY and c.get("status") == "True" for c in status.get("conditions") or [])
    return (str((d.get("metadata") or {}).get("name") or ""), int((d.get("spec") or {}).get("count") or 0),
            int(status.get("readyInstances") or 0), ready)


class _PoolCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        desired = GaugeMetricFamily(
            "isthmus_pool_instances_desired", "HAProxy instances a LoadBalancerPool asks for (spec.count).",
            labels=["pool"],
        )
        ready = GaugeMetricFamily(
            "isthmus_pool_instances_ready",
            "Instances of a LoadBalancerPool running its current generation (status.readyInstances).",
            labels=["pool"],
        )
        pool_ready = GaugeMetricFamily(
            "isthmus_pool_ready", "1 while a LoadBalancerPool is Ready (at least one instance serves it).",
            labels=["pool"],
        )
        up = GaugeMetricFamily(
            "isthmus_pool_haproxy_up",
            "1 while the HAProxy this pool manager runs for a pool's slot is up and serving its config; 0 while "
            "it is starting, failed or restarting.",
            labels=["pool", "slot"],
        )
        pools: dict[str, tuple[int, int, bool]] = {}
        running: dict[tuple[str, str], int] = {}
        for manager in list(_LIVE):
            if not manager.ready:
                continue
            for obj in manager.pools.cache.list():
                name, want, serving, ok = pool_health(obj)
                pools[name] = (want, serving, ok)
            for pool, run in list(manager.running.items()):
                alive = int(run.instance.running and run.state == InstanceState.RUNNING)
                running[(pool, str(run.slot))] = max(running.get((pool, str(run.slot)), 0), alive)
        for name, (want, serving, ok) in sorted(pools.items()):
            desired.add_metric([name], want)
            ready.add_metric([name], serving)
            pool_ready.add_metric([name], 1 if ok else 0)
        for (pool, slot), alive in sorted(running.items()):
            up.add_metric([pool, slot], alive)
        yield from (desired, ready, pool_ready, up)


REGISTRY.register(_PoolCollector())
