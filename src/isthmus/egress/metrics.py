"""Egress metrics (runtime REGISTRY): relayed and refused flows of forwarders and gateways, and the
gateway's programmed rules. Counted per flow, not per buffer, so prometheus_client's cost is fine.

The bindings (claims by phase, each class's addresses, ExternalServices, the source IPs a gateway
owns) are read from the operator's and the gateway's informer caches when scraped, never counted
as they change, so they are what the caches hold now. Labels are classes and phases (an admin's
few classes), never claims or services.

A series exists as soon as its label values are known, at 0: the flow and refusal counters from the
component's start (their labels are fixed), the binding gauges for every phase of each class that
exists. A dashboard then reads 0, not "No data".

The collector reads the operator and the gateway through `OperatorView` and `GatewayView`, which
`operator.EgressOperator` and `gateway.GatewayRuntime` satisfy: this module imports neither."""

from __future__ import annotations

import weakref
from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from isthmus.api.egress import READY, ClaimPhase, SourceIPClass, SourceIPPhase
from isthmus.egress import binding
from isthmus.egress.binder import BY_CLASS
from isthmus.runtime import REGISTRY
from isthmus.runtime.metrics import InformerView

__all__ = ["CLUSTERSET_METRICS", "FLOWS", "LEADING", "REFUSED", "RULES", "SERIES", "GatewayView", "OperatorView",
           "start_series", "track_gateway", "track_operator"]

FLOWS = Counter("isthmus_egress_flows", "Flows relayed (connections, or UDP peer flows).",
                ["component", "direction", "protocol"], registry=REGISTRY)
REFUSED = Counter("isthmus_egress_refused", "Flows refused: the peer is not allowed (fail closed) or the far "
                  "side could not be reached.", ["component", "direction", "reason"], registry=REGISTRY)
RULES = Gauge("isthmus_egress_gateway_rules", "Rules the leading gateway programs.", ["direction"],
              registry=REGISTRY)
LEADING = Gauge("isthmus_egress_gateway_leading", "1 while this gateway replica leads and owns the source IPs.",
                registry=REGISTRY)

SERIES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "forwarder": {
        "flows": (("egress", "TCP"), ("egress", "UDP"), ("ingress", "TCP"), ("ingress", "UDP")),
        "refused": (("egress", "not_a_source"), ("egress", "no_gateway"), ("egress", "gateway_error"),
                    ("ingress", "not_the_gateway"), ("ingress", "bad_header"), ("ingress", "no_rule")),
    },
    "gateway": {
        "flows": (("egress", "TCP"), ("egress", "UDP"), ("ingress", "TCP"), ("ingress", "UDP")),
        "refused": (("egress", "bad_header"), ("egress", "not_allowed"), ("egress", "target_error"),
                    ("ingress", "not_the_target"), ("ingress", "forwarder_error")),
    },
}
"""Every (direction, protocol) a component relays and (direction, reason) it refuses: the label values
are fixed, so each series exists from the start (tests/unit/test_egress_metrics.py checks the code
uses no other)."""


def start_series(component: str) -> None:
    """Create every flow and refusal series of `component` at 0, as it starts: a counter that has
    not counted yet then reads 0 (a dashboard's rate() is 0) instead of having no series at all."""
    for direction, protocol in SERIES[component]["flows"]:
        FLOWS.labels(component, direction, protocol)
    for direction, reason in SERIES[component]["refused"]:
        REFUSED.labels(component, direction, reason)
    if component == "gateway":
        for direction in ("egress", "ingress"):
            RULES.labels(direction)


CLAIM_PHASES = tuple(p.value for p in ClaimPhase)
SOURCE_IP_PHASES = tuple(p.value for p in SourceIPPhase)
READY_STATES = ("true", "false", "unknown")

CLUSTERSET_METRICS = (
    "isthmus_egress_claims",
    "isthmus_egress_source_ips",
    "isthmus_egress_class_capacity",
    "isthmus_egress_class_allocated",
    "isthmus_egress_external_services",
    "isthmus_egress_gateway_source_ips",
)
"""The binding families (the dashboard test checks each is drawn)."""

class BinderView(Protocol):
    """The binder's informers (egress/binder.py), and the classes a class shares addresses with."""

    @property
    def classes(self) -> InformerView: ...

    @property
    def claims(self) -> InformerView: ...

    @property
    def sips(self) -> InformerView: ...

    @property
    def externals(self) -> InformerView: ...

    def older(self, cls: SourceIPClass, /) -> list[SourceIPClass]: ...


class OperatorView(Protocol):
    """What the collector reads of the egress operator (its caches are read only while it is ready)."""

    @property
    def ready(self) -> bool: ...

    @property
    def binder(self) -> BinderView: ...


class GatewayView(Protocol):
    """What the collector reads of a gateway replica: the rules it programs while leading (its
    readiness means healthy: a ready standby owns nothing)."""

    @property
    def programmed(self) -> bool: ...

    @property
    def egress(self) -> Mapping[tuple[str, str, str, int], Any]: ...

    @property
    def ingress(self) -> Mapping[tuple[str, str, int], Any]: ...


_OPERATORS: weakref.WeakSet[OperatorView] = weakref.WeakSet()
_GATEWAYS: weakref.WeakSet[GatewayView] = weakref.WeakSet()


def track_operator(operator: OperatorView) -> None:
    """Report this operator's caches at every scrape while it leads (held weakly)."""
    _OPERATORS.add(operator)


def track_gateway(gateway: GatewayView) -> None:
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
                classes[cls.name] = (binding.capacity(cls, binder.older(cls)),
                                     len(binder.sips.cache.index_keys(BY_CLASS, cls.name)))
            # Every phase of every class that exists, 0 until something is in it; a class deleted
            # (and nothing left of it) has no series.
            for name in classes:
                by_claim.update({(name, phase): 0 for phase in CLAIM_PHASES})
                by_sip.update({(name, phase): 0 for phase in SOURCE_IP_PHASES})
            ready.update({state: 0 for state in READY_STATES})
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
                                     for gw in gateways if gw.programmed))
        yield from (claims, sips, capacity, allocated, externals, owned)


REGISTRY.register(_EgressCollector())
