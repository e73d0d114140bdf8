"""Egress metrics (runtime REGISTRY): relayed and refused flows of forwarders and gateways, and the
gateway's programmed rules. Counted per flow, not per buffer, so prometheus_client's cost is fine.

The bindings (claims by phase, each class's addresses, ExternalServices, the source IPs a gateway
owns) are read from the operator's and the gateway's informer caches when scraped, never counted
as they change, so they are what the caches hold now. Labels are classes and phases (an admin's
few classes), never claims or services."""

from __future__ import annotations

import weakref
from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from isthmus.api.egress import READY, ClaimPhase, SourceIPClass, SourceIPPhase
from isthmus.egress import binding
from isthmus.egress.binder import BY_CLASS
from isthmus.runtime import REGISTRY

if TYPE_CHECKING:
    from isthmus.egress.gateway import GatewayRuntime
    from isthmus.egress.operator import EgressOperator

__all__ = ["CLUSTERSET_METRICS", "FLOWS", "LEADING", "REFUSED", "RULES", "track_gateway", "track_operator"]

FLOWS = Counter("isthmus_egress_flows", "Flows relayed (connections, or UDP peer flows).",
                ["component", "direction", "protocol"], registry=REGISTRY)
REFUSED = Counter("isthmus_egress_refused", "Flows refused: the peer is not allowed (fail closed) or the far "
                  "side could not be reached.", ["component", "direction", "reason"], registry=REGISTRY)
RULES = Gauge("isthmus_egress_gateway_rules", "Rules the leading gateway programs.", ["direction"],
              registry=REGISTRY)
LEADING = Gauge("isthmus_egress_gateway_leading", "1 while this gateway replica leads and owns the source IPs.",
                registry=REGISTRY)

CLUSTERSET_METRICS = (
    "isthmus_egress_claims",
    "isthmus_egress_source_ips",
    "isthmus_egress_class_capacity",
    "isthmus_egress_class_allocated",
    "isthmus_egress_external_services",
    "isthmus_egress_gateway_source_ips",
)
"""The binding families (the dashboard test checks each is drawn)."""

_OPERATORS: weakref.WeakSet[EgressOperator] = weakref.WeakSet()
_GATEWAYS: weakref.WeakSet[GatewayRuntime] = weakref.WeakSet()


def track_operator(operator: EgressOperator) -> None:
    """Report this operator's caches at every scrape while it leads (held weakly)."""
    _OPERATORS.add(operator)


def track_gateway(gateway: GatewayRuntime) -> None:
    """Report the source IPs this gateway replica owns (held weakly)."""
    _GATEWAYS.add(gateway)


def _d(obj: Any) -> Mapping[str, Any]:
    return obj if isinstance(obj, dict) else obj.to_dict()


def _ready(obj: Mapping[str, Any]) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == READY:
            return "true" if c.get("status") == "True" else "false"
    return "unknown"


class _EgressCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        claims = GaugeMetricFamily(
            "isthmus_egress_claims",
            "SourceIPClaims by class and phase (Pending, Bound, Lost; Pending also before the first bind).",
            labels=["class", "phase"],
        )
        sips = GaugeMetricFamily(
            "isthmus_egress_source_ips", "SourceIPs by class and phase (Available, Bound, Released, Failed).",
            labels=["class", "phase"],
        )
        capacity = GaugeMetricFamily(
            "isthmus_egress_class_capacity", "Addresses in a SourceIPClass's valid ranges.", labels=["class"]
        )
        allocated = GaugeMetricFamily(
            "isthmus_egress_class_allocated", "SourceIPs of a SourceIPClass that exist (any phase).",
            labels=["class"],
        )
        externals = GaugeMetricFamily(
            "isthmus_egress_external_services", "ExternalServices by their Ready condition (true, false, unknown).",
            labels=["ready"],
        )
        owned = GaugeMetricFamily(
            "isthmus_egress_gateway_source_ips",
            "Source IPs this gateway replica owns and carries traffic from (0 unless it leads).",
        )
        by_claim: Tally[tuple[str, str]] = Tally()
        by_sip: Tally[tuple[str, str]] = Tally()
        classes: dict[str, tuple[int, int]] = {}
        ready: Tally[str] = Tally()
        for op in list(_OPERATORS):
            if not op.ready:
                continue
            binder = op.binder
            for obj in binder.claims.cache.list():
                d = _d(obj)
                by_claim[(str((d.get("spec") or {}).get("sourceIPClassName") or ""),
                          str((d.get("status") or {}).get("phase") or ClaimPhase.PENDING))] += 1
            for obj in binder.sips.cache.list():
                d = _d(obj)
                by_sip[(str((d.get("spec") or {}).get("sourceIPClassName") or ""),
                        str((d.get("status") or {}).get("phase") or SourceIPPhase.AVAILABLE))] += 1
            for obj in binder.classes.cache.list():
                cls = SourceIPClass.from_dict(_d(obj))
                classes[cls.name] = (binding.capacity(cls), len(binder.sips.cache.index_keys(BY_CLASS, cls.name)))
            ready.update(_ready(_d(o)) for o in binder.externals.cache.list())
        for (cls_name, phase), n in sorted(by_claim.items()):
            claims.add_metric([cls_name, phase], n)
        for (cls_name, phase), n in sorted(by_sip.items()):
            sips.add_metric([cls_name, phase], n)
        for name, (cap, used) in sorted(classes.items()):
            capacity.add_metric([name], cap)
            allocated.add_metric([name], used)
        for state, n in sorted(ready.items()):
            externals.add_metric([state], n)
        gateways = list(_GATEWAYS)
        if gateways:
            owned.add_metric([], sum(len({k[1] for k in gw.egress} | {k[1] for k in gw.ingress})
                                     for gw in gateways if gw.ready))
        yield from (claims, sips, capacity, allocated, externals, owned)


REGISTRY.register(_EgressCollector())
