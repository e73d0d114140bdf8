"""Merge every cluster's view of one exported service into the aggregated ServiceImport spec.

The rules are docs/discovery.md "Aggregation rules" (KEP-1645 "Constraints and Conflict Resolution"):
the oldest export (by exportCreationTimestamp, ties by cluster ID) wins every property, ports are
the union by name, and every disagreement with the winner becomes a (reason, message) pair for
the one `Conflict` condition that is set on *every* exporter's ServiceExport.

Each agent runs this independently on the same ExportedService objects, and all of them must derive
identical ServiceImports, so the result depends only on the set of inputs, never on their order. No
aggregate is stored on the broker (docs/discovery.md "Broker tenancy"): what every cluster must agree
on, the merged spec, the conflict verdicts and the VIP (`decided_ips`), is derived by every reader
from the ExportedServices, each written by its own cluster alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from isthmus.api.mcs import (
    USE_CLUSTERSET_IP_ANNOTATION,
    ConflictReason,
    ExportedServiceSpec,
    ServiceImportSpec,
    ServiceImportType,
    ServicePort,
    SessionAffinityConfig,
)

__all__ = ["Aggregate", "Derived", "aggregate", "decided_ips", "derive", "port_key", "sort_exports"]


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


def port_key(port: ServicePort) -> str | tuple[int, str]:
    """Ports merge by name; an unnamed port (only legal as a Service's single port) by (port, protocol)."""
    return port.name if port.name else (port.port, port.protocol)


def _describe_port(port: ServicePort) -> str:
    text = f"{port.protocol}/{port.port}"
    return f"{text} with appProtocol {port.app_protocol}" if port.app_protocol else text


def _port_label(port: ServicePort) -> str:
    return f'port "{port.name}"' if port.name else f"unnamed port {port.protocol}/{port.port}"


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

    # Type.
    for exp in ordered[1:]:
        if exp.type != oldest.type:
            conflicts.append(
                (
                    ConflictReason.TYPE,
                    f"type is {oldest.type} in cluster {oldest.cluster} (oldest) "
                    f"but {exp.type} in cluster {exp.cluster}",
                )
            )
            losers.add(exp.cluster)

    # Ports: union by name, the oldest definition of a name wins; order of first appearance.
    ports: dict[str | tuple[int, str], tuple[ServicePort, str]] = {}
    for exp in ordered:
        for port in exp.ports:
            key = port_key(port)
            if key not in ports:
                ports[key] = (port, exp.cluster)
                continue
            first, owner = ports[key]
            if (first.port, first.protocol, first.app_protocol) != (
                port.port,
                port.protocol,
                port.app_protocol,
            ):
                conflicts.append(
                    (
                        ConflictReason.PORT,
                        f"{_port_label(first)} is {_describe_port(first)} in cluster {owner} (oldest) "
                        f"but {_describe_port(port)} in cluster {exp.cluster}",
                    )
                )
                losers.add(exp.cluster)

    # Session affinity, then its config (only compared where the affinity itself agrees).
    for exp in ordered[1:]:
        if _affinity(exp) != _affinity(oldest):
            conflicts.append(
                (
                    ConflictReason.SESSION_AFFINITY,
                    f"session affinity is {_affinity(oldest)} in cluster {oldest.cluster} (oldest) "
                    f"but {_affinity(exp)} in cluster {exp.cluster}",
                )
            )
            losers.add(exp.cluster)
    for exp in ordered[1:]:
        if _affinity(exp) != _affinity(oldest):
            continue
        mine, theirs = (
            _affinity_timeout(oldest.session_affinity_config),
            _affinity_timeout(exp.session_affinity_config),
        )
        if mine != theirs:
            conflicts.append(
                (
                    ConflictReason.SESSION_AFFINITY_CONFIG,
                    f"session affinity timeout is {_show(mine)} in cluster {oldest.cluster} (oldest) "
                    f"but {_show(theirs)} in cluster {exp.cluster}",
                )
            )
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
        ports=[p.model_copy() for p, _ in ports.values()],
        ips=ips,
        ip_families=list(oldest.ip_families) if oldest.ip_families is not None else None,
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
