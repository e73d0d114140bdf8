"""Exposure metrics, read from the broker controller's cache of MultiClusterServices when scraped.

Labels are the exposure type and the Ready condition, never the object: a clusterset with
thousands of MultiClusterServices still has a handful of series. Only the leading controller
reports, since a standby's cache is empty.

The collector reads the controller through `MultiClusterServices`, which `broker.BrokerController`
satisfies: this module does not import it.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from isthmus.api.mcsvc import ConditionType
from isthmus.runtime import REGISTRY
from isthmus.runtime.metrics import InformerView

__all__ = ["CLUSTERSET_METRICS", "MultiClusterServices", "exposure_summary", "track"]

CLUSTERSET_METRICS = ("isthmus_multicluster_services",)
"""Every family this module exports (the dashboard test checks each is drawn)."""

_READY = str(ConditionType.READY)


class MultiClusterServices(Protocol):
    """What the collector reads of the broker controller: its MultiClusterService informer, while ready."""

    @property
    def ready(self) -> bool: ...

    @property
    def mcs(self) -> InformerView: ...


_LIVE: weakref.WeakSet[MultiClusterServices] = weakref.WeakSet()


def track(controller: MultiClusterServices) -> None:
    """Report this controller's cache at every scrape while it leads (held weakly)."""
    _LIVE.add(controller)


def exposure_summary(obj: Any) -> tuple[list[str], str]:
    """(the exposure types, the Ready condition as true/false/unknown) of a MultiClusterService."""
    d: Mapping[str, Any] = obj if isinstance(obj, dict) else obj.to_dict()
    ready = "unknown"
    for c in (d.get("status") or {}).get("conditions") or ():
        if c.get("type") == _READY:
            ready = "true" if c.get("status") == "True" else "false"
    return [str(t) for t in (d.get("spec") or {}).get("types") or ()], ready


class _ExposureCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        fam = GaugeMetricFamily(
            "isthmus_multicluster_services",
            "MultiClusterServices by exposure type (CrossCluster, LoadBalancer; one with both counts under "
            "both) and Ready condition (true, false, unknown).",
            labels=["type", "ready"],
        )
        counts: Counter[tuple[str, str]] = Counter()
        for controller in list(_LIVE):
            if not controller.ready:
                continue
            for obj in controller.mcs.cache.list():
                types, ready = exposure_summary(obj)
                counts.update((t, ready) for t in types)
        for (type_, ready), n in sorted(counts.items()):
            fam.add_metric([type_, ready], n)
        yield fam


REGISTRY.register(_ExposureCollector())
