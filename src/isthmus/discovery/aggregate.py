"""Merge every cluster's view of one exported service into the aggregated ServiceImport spec.

The rules are docs/discovery.md "Aggregation rules" (KEP-1645 "Constraints and Conflict Resolution"):
the oldest export (by exportCreationTimestamp, ties by cluster ID) wins every property, ports are
the union merged by name then by (protocol, port), and every disagreement with the winner (for
ports: any difference between port sets) becomes a (reason, message) pair for the one `Conflict`
condition that is set on *every* exporter's ServiceExport.

Each agent runs this independently on the same ExportedService objects, and all of them must derive
identical ServiceImports, so the result depends only on the set of inputs, never on their order. No
aggregate is stored on the broker (docs/discovery.md "Broker tenancy"): what every cluster must agree
on, the merged spec, the conflict verdicts and the VIP (`decided_ips`), is derived by every reader
from the ExportedServices, each written by its own cluster alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from isthmus.api.mcs import (
    USE_CLUSTERSET_IP_ANNOTATION,
    ConflictReason,
    ExportedServiceSpec,
    IPFamily,
    ServiceImportSpec,
    ServiceImportType,
    ServicePort,
    SessionAffinityConfig,
)

__all__ = [
    "Aggregate",
    "Derived",
    "aggregate",
    "decided_ips",
    "derive",
    "import_families",
    "merge_ports",
    "port_key",
    "served_ports",
    "sort_exports",
]


@dataclass
class Aggregate:
    """The merged view of one service: what the aggregated ServiceImport carries, plus its conflicts."""

    spec: ServiceImportSpec
    """The merged spec; `ips` is exactly what the caller passed (the VIP is not aggregated)."""
    clusters: list[str]
    """Every exporting cluster ID, sorted (→ status.clusters)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Exported labels: the oldest export's whole set."""
    annotations: dict[str, str] = field(default_factory=dict)
    """Exported annotations: the oldest export's whole set."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) pairs in a fixed order, for `api.mcs.conflict_condition`."""
    conflicting_clusters: set[str] = field(default_factory=set)
    """Clusters whose export lost at least one rule to an older one (the winners are not in it)."""
    served: dict[str, frozenset[tuple[str, str]]] = field(default_factory=dict)
    """Per exporting cluster, the (name, protocol) of the ServiceImport ports its Service exposes as
    the ServiceImport does (`served_ports`): its imported EndpointSlice lists only those."""


def sort_exports(exports: Sequence[ExportedServiceSpec]) -> list[ExportedServiceSpec]:
    """Oldest first by (exportCreationTimestamp, cluster), one entry per cluster (its oldest)."""
    ordered = sorted(exports, key=lambda e: (e.export_creation_timestamp, e.cluster))
    seen: set[str] = set()
    out: list[ExportedServiceSpec] = []
    for exp in ordered:
        if exp.cluster not in seen:
            seen.add(exp.cluster)
            out.append(exp)
    return out


def port_key(port: ServicePort) -> str:
    """Ports merge by name first (KEP-1645 "Service Port"): the unnamed port, only legal as a
    Service's single port, is the name "" (a ServiceImport may not repeat a name, "" included)."""
    return port.name or ""


def _port_tuple(port: ServicePort) -> tuple[str, str, int, str | None]:
    """What makes two exporters' ports identical: every external property of a Service port."""
    return (port.name or "", port.protocol, port.port, port.app_protocol)


def merge_ports(ordered: Sequence[ExportedServiceSpec]) -> list[ServicePort]:
    """The ServiceImport's ports: the union of the exporters' (oldest first), merged first by name
    and then by (protocol, port), the first (oldest) definition winning each duplicate, so the
    result repeats neither a name nor a protocol and port number. Order of first appearance."""
    names: set[str] = set()
    numbers: set[tuple[str, int]] = set()
    out: list[ServicePort] = []
    for exp in ordered:
        for port in exp.ports:
            if port_key(port) in names or (port.protocol, port.port) in numbers:
                continue
            names.add(port_key(port))
            numbers.add((port.protocol, port.port))
            out.append(port)
    return out


def served_ports(
    ports: Sequence[ServicePort], ordered: Sequence[ExportedServiceSpec]
) -> dict[str, frozenset[tuple[str, str]]]:
    """Per cluster, the ServiceImport ports (as (name, protocol), how EndpointSlice ports are matched)
    that its own Service exposes with the same name, protocol and number: traffic to a conflicting
    port goes only to clusters that expose it (KEP-1645 "Service Port"; conformance
    "StrictPortConflict")."""
    out: dict[str, frozenset[tuple[str, str]]] = {}
    for exp in ordered:
        own = {(p.name or "", p.protocol, p.port) for p in exp.ports}
        out[exp.cluster] = frozenset(
            (p.name or "", p.protocol) for p in ports if (p.name or "", p.protocol, p.port) in own
        )
    return out


def _describe_port(port: ServicePort) -> str:
    text = f"{port.protocol}/{port.port}"
    return f"{text} with appProtocol {port.app_protocol}" if port.app_protocol else text


def _port_label(port: ServicePort) -> str:
    return f'port "{port.name}"' if port.name else "the unnamed port"


def _port_differences(oldest: ExportedServiceSpec, other: ExportedServiceSpec) -> list[str]:
    """What differs between two exporters' port sets, by name (the oldest's order, then the other's)."""
    mine = {port_key(p): p for p in oldest.ports}
    theirs = {port_key(p): p for p in other.ports}
    out: list[str] = []
    for key, port in mine.items():
        if key not in theirs:
            out.append(f"{_port_label(port)} ({_describe_port(port)}) of cluster {oldest.cluster} (oldest) "
                       f"is not in cluster {other.cluster}")
        elif _port_tuple(port) != _port_tuple(theirs[key]):
            out.append(f"{_port_label(port)} is {_describe_port(port)} in cluster {oldest.cluster} (oldest) "
                       f"but {_describe_port(theirs[key])} in cluster {other.cluster}")
    for key, port in theirs.items():
        if key not in mine:
            out.append(f"{_port_label(port)} ({_describe_port(port)}) of cluster {other.cluster} "
                       f"is not in cluster {oldest.cluster} (oldest)")
    return out


def _ip_family(ip: str) -> IPFamily | None:
    try:
        return "IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"
    except ValueError:
        return None


def import_families(ordered: Sequence[ExportedServiceSpec], ips: Sequence[str] | None) -> list[IPFamily]:
    """The ServiceImport's ipFamilies, never empty, never repeating a family (KEP-1645 leaves how to
    the implementation). With ClusterSet IPs: their families, in their order (`ips[i]` is of family
    `ipFamilies[i]`). Otherwise the oldest export's families, in its order (the first exporter that
    reports any, for Services from before kube-lite set them on headless ones); IPv4 when nobody
    says, the one family Isthmus's clusters have."""
    from_ips = [f for f in (_ip_family(ip) for ip in ips or ()) if f is not None]
    if from_ips:
        return list(dict.fromkeys(from_ips))
    for exp in ordered:
        if exp.ip_families:
            return list(dict.fromkeys(exp.ip_families))
    return ["IPv4"]


def _itp(exp: ExportedServiceSpec) -> str:
    """Unset internalTrafficPolicy is kube's default, "Cluster"."""
    return exp.internal_traffic_policy or "Cluster"


def _affinity(exp: ExportedServiceSpec) -> str:
    """Unset session affinity is kube's default, "None"."""
    return exp.session_affinity or "None"


def _affinity_timeout(config: SessionAffinityConfig | None) -> int | None:
    """The only setting in sessionAffinityConfig; unset at any level compares equal."""
    if config is None or config.client_ip is None:
        return None
    return config.client_ip.timeout_seconds


def _show(value: object) -> str:
    return "unset" if value is None else str(value)


_MAX_DIFFERENCES = 3
"""How many differing keys a labels/annotations conflict message spells out."""


def _map_differences(oldest: Mapping[str, str], other: Mapping[str, str], a: str, b: str) -> str:
    """What differs between two exported label/annotation sets, key by key (sorted, capped)."""
    parts: list[str] = []
    for key in sorted(oldest.keys() | other.keys()):
        if key not in other:
            parts.append(f'"{key}" is only in cluster {a}')
        elif key not in oldest:
            parts.append(f'"{key}" is only in cluster {b}')
        elif oldest[key] != other[key]:
            parts.append(f'"{key}" is "{oldest[key]}" in cluster {a} but "{other[key]}" in cluster {b}')
    more = len(parts) - _MAX_DIFFERENCES
    shown = "; ".join(parts[:_MAX_DIFFERENCES])
    return f"{shown}; and {more} more" if more > 0 else shown


def _merge_map(
    ordered: Sequence[ExportedServiceSpec],
    get: Callable[[ExportedServiceSpec], Mapping[str, str] | None],
    what: str,
    reason: ConflictReason,
    conflicts: list[tuple[str, str]],
    losers: set[str],
) -> dict[str, str]:
    """The oldest export's exported labels (or annotations), as a whole set.

    KEP-1645 "Labels and Annotations": the set applies to the service as a whole, so when the sets of
    name/value pairs are not identical the conflict resolution picks one set, the oldest's; keys
    are never mixed from several exporters. An exporter without any counts as the empty set, which
    differs from a non-empty one (the KEP compares the sets, and the oldest empty set does win).
    """
    oldest = ordered[0]
    winner = dict(get(oldest) or {})
    for exp in ordered[1:]:
        mine = get(exp) or {}
        if mine == winner:
            continue
        conflicts.append(
            (
                reason,
                f"exported {what}s of cluster {exp.cluster} differ from those of cluster "
                f"{oldest.cluster} (oldest, whose set is used): "
                + _map_differences(winner, mine, oldest.cluster, exp.cluster),
            )
        )
        losers.add(exp.cluster)
    return dict(sorted(winner.items()))


def aggregate(
    exports: Sequence[ExportedServiceSpec],
    *,
    ips: list[str] | None,
    vip_enabled: bool,
) -> Aggregate:
    """Merge the exports of one service (docs/discovery.md "Aggregation rules").

    `ips` is the aggregate's VIP (copied as is); `vip_enabled` is the aggregate's fixed
    `use-clusterset-ip` setting, against which each exporter's own setting is checked.
    Raises ValueError for no exports: there is no ServiceImport without an exporter.
    """
    if not exports:
        raise ValueError("cannot aggregate a service that no cluster exports")
    ordered = sort_exports(exports)
    oldest = ordered[0]
    conflicts: list[tuple[str, str]] = []
    losers: set[str] = set()

    def differs(reason: str, what: str, value: Callable[[ExportedServiceSpec], object],
                among: Sequence[ExportedServiceSpec] = ordered[1:]) -> None:
        """The oldest's `what` wins (KEP-1645 "Constraints"); each export that differs is a conflict."""
        for exp in among:
            if value(exp) != value(oldest):
                conflicts.append((reason, f"{what} is {_show(value(oldest))} in cluster {oldest.cluster} (oldest) "
                                          f"but {_show(value(exp))} in cluster {exp.cluster}"))
                losers.add(exp.cluster)

    differs(ConflictReason.TYPE, "type", lambda e: e.type)
    # Ports: the union (merge_ports), and a PortConflict whenever the port sets are not identical
    # (KEP-1645 "Service Port"): an extra or missing port too, not only a name defined twice.
    ports = merge_ports(ordered)
    oldest_ports = sorted(_port_tuple(p) for p in oldest.ports)
    for exp in ordered[1:]:
        if sorted(_port_tuple(p) for p in exp.ports) == oldest_ports:
            continue
        conflicts.extend((ConflictReason.PORT, text) for text in _port_differences(oldest, exp))
        losers.add(exp.cluster)

    # Session affinity, then its timeout (compared only where the affinity itself agrees); internal
    # traffic policy and traffic distribution.
    differs(ConflictReason.SESSION_AFFINITY, "session affinity", _affinity)
    differs(ConflictReason.SESSION_AFFINITY_CONFIG, "session affinity timeout",
            lambda e: _affinity_timeout(e.session_affinity_config),
            [e for e in ordered[1:] if _affinity(e) == _affinity(oldest)])
    differs(ConflictReason.INTERNAL_TRAFFIC_POLICY, "internal traffic policy", _itp)
    differs(ConflictReason.TRAFFIC_DISTRIBUTION, "traffic distribution", lambda e: e.traffic_distribution)

    # IP families: a conflict only where it makes traffic over a family reach a subset of the
    # clusters (KEP-1645 "Exporting Services"): an exporter lacking one of the import's families.
    # An exporter with an extra family is none: the import does not offer that family. An export
    # without ipFamilies (an old view) says nothing either way.
    families = import_families(ordered, ips)
    for exp in ordered:
        if exp.ip_families is None:
            continue
        missing = [f for f in families if f not in exp.ip_families]
        if missing:
            conflicts.append(
                (
                    ConflictReason.IP_FAMILY,
                    f"the Service in cluster {exp.cluster} has IP families {', '.join(exp.ip_families)} but the "
                    f"service is imported as {', '.join(families)}: its endpoints are not reached over "
                    f"{', '.join(missing)}",
                )
            )
            if exp is not oldest:
                losers.add(exp.cluster)

    labels = _merge_map(
        ordered, lambda e: e.exported_labels, "label", ConflictReason.LABELS, conflicts, losers
    )
    annotations = _merge_map(
        ordered,
        lambda e: e.exported_annotations,
        "annotation",
        ConflictReason.ANNOTATIONS,
        conflicts,
        losers,
    )

    # VIP setting: fixed on the aggregate when it was created; a differing export still exports.
    # A headless service has no VIP, so the setting means nothing for a headless export (whose view
    # carries clusterset_ip_enabled=False whatever the user asked) nor for a headless aggregate:
    # comparing them would report a conflict about a VIP nobody can have, naming a value the user
    # never set. A headless/ClusterSetIP mix is already a TypeConflict.
    setting = "true" if vip_enabled else "false"
    compared = [] if oldest.type == ServiceImportType.HEADLESS else ordered
    for exp in compared:
        if exp.type == ServiceImportType.HEADLESS:
            continue
        if exp.clusterset_ip_enabled != vip_enabled:
            asked = "true" if exp.clusterset_ip_enabled else "false"
            conflicts.append(
                (
                    ConflictReason.CLUSTERSET_IP_ENABLEMENT,
                    f"cluster {exp.cluster} exports with {USE_CLUSTERSET_IP_ANNOTATION}={asked} "
                    f"but the service has {USE_CLUSTERSET_IP_ANNOTATION}={setting} (set by its first "
                    f"export); it is exported with {setting}",
                )
            )
            losers.add(exp.cluster)

    spec = ServiceImportSpec(
        type=oldest.type,
        ports=[p.model_copy() for p in ports],
        ips=ips,
        ip_families=families,
        session_affinity=oldest.session_affinity,
        session_affinity_config=(
            oldest.session_affinity_config.model_copy(deep=True)
            if oldest.session_affinity_config is not None
            else None
        ),
        internal_traffic_policy=oldest.internal_traffic_policy,
        traffic_distribution=oldest.traffic_distribution,
    )
    return Aggregate(
        spec=spec,
        clusters=sorted(e.cluster for e in ordered),
        labels=labels,
        annotations=annotations,
        conflicts=[(str(r), m) for r, m in conflicts],
        conflicting_clusters=losers,
        served=served_ports(ports, ordered),
    )


def decided_ips(exports: Sequence[ExportedServiceSpec]) -> tuple[list[str], str | None] | None:
    """The service's VIP as every reader derives it: (ips, allocated-by) of the oldest exporter that has
    decided one (`clustersetIPs` present), `[]` meaning none; None while no exporter has decided.

    The first exporter decides (allocating from its own CIDR when the service wants a VIP); every later
    one adopts the oldest decision it sees, so the VIP outlives the cluster that allocated it. Two
    first exporters at the same moment both decide; the older one's decision wins and the other adopts
    it, freeing its own allocation (docs/discovery.md "ClusterSet IP").
    """
    for exp in sort_exports([e for e in exports if e.clusterset_ips is not None]):
        ips = list(exp.clusterset_ips or [])
        return ips, (exp.clusterset_ip_allocated_by if ips else None)
    return None


@dataclass
class Derived:
    """The aggregated view of one service that every reader derives from the same exports."""

    result: Aggregate
    ips: list[str]
    allocated_by: str | None
    vip_enabled: bool


def derive(exports: Sequence[ExportedServiceSpec]) -> Derived | None:
    """The merged service (`aggregate`) with its VIP (`decided_ips`); None while no exporter decided
    the VIP (there is no ServiceImport before that) or when nothing is exported. A headless service
    (the oldest export's type) has no VIP whatever an exporter holds."""
    if not exports:
        return None
    decided = decided_ips(exports)
    if decided is None:
        return None
    ips, allocated_by = decided
    if sort_exports(exports)[0].type == ServiceImportType.HEADLESS:
        ips, allocated_by = [], None
    return Derived(aggregate(exports, ips=ips or None, vip_enabled=bool(ips)), ips, allocated_by, bool(ips))
