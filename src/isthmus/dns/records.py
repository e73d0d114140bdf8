"""Pure answer builders: the records of one service, from plain snapshots of its objects.

Nothing here touches the network or the API: `source` turns informer objects into the
snapshots below, `wire` turns the resulting records into response bytes. Every rule of
docs/dns.md "Names and answers" lives here, so it is unit-tested without sockets.

Names are lowercase, without the trailing dot. A record set maps (name, qtype) to a *ring*:
a list of alternative answers served in turn (round-robin over clusters for a ClusterSetIP
service without a VIP); almost every ring has one element.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "AAAA",
    "ANY",
    "CNAME",
    "HEADLESS",
    "PTR",
    "SRV",
    "TXT",
    "A",
    "Addr",
    "Endpoint",
    "ImportSnap",
    "LocalService",
    "Port",
    "Ptr",
    "Rdata",
    "RecordSet",
    "SliceSnap",
    "Srv",
    "Txt",
    "clusterset_records",
    "endpoint_hostname",
    "local_records",
    "reverse_name",
    "service_records",
]

A = 1
CNAME = 5
PTR = 12
TXT = 16
AAAA = 28
SRV = 33
ANY = 255

HEADLESS = "Headless"
CLUSTER_SET_IP = "ClusterSetIP"


# --- snapshots (inputs) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Port:
    name: str | None
    protocol: str
    port: int


@dataclass(frozen=True)
class Endpoint:
    addresses: tuple[str, ...]
    ready: bool = True
    hostname: str | None = None


@dataclass(frozen=True)
class SliceSnap:
    """One EndpointSlice: the cluster it describes, its ports and endpoints."""

    cluster: str
    endpoints: tuple[Endpoint, ...] = ()
    ports: tuple[Port, ...] = ()


@dataclass(frozen=True)
class ImportSnap:
    """A ServiceImport in this cluster (the agent's copy of the aggregate)."""

    namespace: str
    name: str
    type: str = CLUSTER_SET_IP
    ips: tuple[str, ...] = ()
    ports: tuple[Port, ...] = ()
    clusters: tuple[str, ...] = ()
    locality: str = ""
    """`local`, `remote`, or "" (no preference: the default rules below): isthmus.io/affinity, else
    the import's trafficDistribution (api.mcs.effective_preference)."""


@dataclass(frozen=True)
class LocalService:
    """This cluster's own Service and its kube EndpointSlices (label kubernetes.io/service-name)."""

    namespace: str
    name: str
    cluster_ips: tuple[str, ...] = ()
    headless: bool = False
    ports: tuple[Port, ...] = ()
    publish_not_ready: bool = False
    external_name: str | None = None
    slices: tuple[SliceSnap, ...] = ()


# --- records (outputs) -----------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Addr:
    ip: str


@dataclass(frozen=True, order=True)
class Srv:
    priority: int
    weight: int
    port: int
    target: str


@dataclass(frozen=True, order=True)
class Txt:
    text: str


@dataclass(frozen=True, order=True)
class Ptr:
    target: str


@dataclass(frozen=True, order=True)
class Cname:
    target: str


Rdata = Addr | Srv | Txt | Ptr | Cname


@dataclass
class RecordSet:
    """Records of one service: (name, qtype) → ring of answers; `names` is every name that exists
    (owners and their empty non-terminal ancestors below the zone apex), for NODATA vs NXDOMAIN."""

    rrsets: dict[tuple[str, int], list[tuple[Rdata, ...]]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    cnames: dict[str, str] = field(default_factory=dict)
    """Owner → target for ExternalName services: every qtype at the owner answers the CNAME."""

    def add(self, name: str, qtype: int, records: Iterable[Rdata]) -> None:
        """A one-answer rrset; records are de-duplicated and sorted (identical records once)."""
        recs = tuple(sorted(set(records), key=_sort_key))
        if recs:
            self.rrsets[(name, qtype)] = [recs]

    def add_ring(self, name: str, qtype: int, ring: Sequence[Iterable[Rdata]]) -> None:
        answers = [tuple(sorted(set(r), key=_sort_key)) for r in ring]
        answers = [a for a in answers if a]
        if answers:
            self.rrsets[(name, qtype)] = answers

    def get(self, name: str, qtype: int) -> list[tuple[Rdata, ...]]:
        return self.rrsets.get((name, qtype), [])

    def update(self, other: RecordSet) -> None:
        self.rrsets.update(other.rrsets)
        self.names |= other.names
        self.cnames.update(other.cnames)


def _sort_key(r: Rdata) -> tuple[int, str]:
    if isinstance(r, Addr):
        ip = ipaddress.ip_address(r.ip)
        return (ip.version, f"{int(ip):040d}")
    return (0, repr(r))


# --- helpers -----------------------------------------------------------------------------------------


def endpoint_hostname(ep: Endpoint) -> str:
    """The endpoint's `hostname`, else its first address with `.`/`:` → `-` (MCS DNS spec)."""
    if ep.hostname:
        return ep.hostname.lower()
    return ep.addresses[0].replace(".", "-").replace(":", "-").lower()


def reverse_name(ip: str) -> str:
    return ipaddress.ip_address(ip).reverse_pointer


def _split_ips(ips: Iterable[str]) -> tuple[list[Addr], list[Addr]]:
    v4: list[Addr] = []
    v6: list[Addr] = []
    for raw in ips:
        try:
            ip = ipaddress.ip_address(raw)
        except ValueError:
            continue  # a bad address in an object must not stop the other answers
        (v4 if ip.version == 4 else v6).append(Addr(str(ip)))
    return v4, v6


def _add_addresses(rs: RecordSet, name: str, ips: Iterable[str]) -> None:
    v4, v6 = _split_ips(ips)
    rs.add(name, A, v4)
    rs.add(name, AAAA, v6)


def _srv_set(records: Iterable[tuple[int, str]]) -> list[Srv]:
    """SRV records (port, target) de-duplicated, weights sharing 100 evenly (priority 0)."""
    unique = sorted(set(records))
    if not unique:
        return []
    weight = max(1, 100 // len(unique))
    return [Srv(0, weight, port, target) for port, target in unique]


def _named(ports: Iterable[Port]) -> list[Port]:
    return [p for p in ports if p.name]


def _srv_owner(port: Port, base: str) -> str:
    assert port.name
    return f"_{port.name.lower()}._{port.protocol.lower()}.{base}"


def _slice_port(s: SliceSnap, port: Port) -> int:
    """The endpoint port for a service port: same name and protocol in the slice, else the service's."""
    for p in s.ports:
        if p.name == port.name and p.protocol == port.protocol:
            return p.port
    return port.port


def _usable(ep: Endpoint, publish_not_ready: bool) -> bool:
    return bool(ep.addresses) and (ep.ready or publish_not_ready)


def _add_names(rs: RecordSet, zone: str) -> None:
    """Register every owner and its ancestors strictly below the zone apex (empty non-terminals)."""
    suffix = "." + zone
    owners = {n for n, _ in rs.rrsets} | set(rs.names) | set(rs.cnames)
    for name in owners:
        if not name.endswith(suffix):
            continue
        while name.endswith(suffix):
            rs.names.add(name)
            name = name.split(".", 1)[1]


# --- clusterset zone ---------------------------------------------------------------------------------


def clusterset_records(
    imp: ImportSnap,
    slices: Sequence[SliceSnap],
    *,
    local_cluster: str,
    local: LocalService | None,
    zone: str,
    cluster_names: bool = False,
    ptr: bool = True,
) -> RecordSet:
    """Records of one ServiceImport in one clusterset zone (`ptr`: also PTR for its VIPs).

    `slices` are the imported EndpointSlices (one per other cluster). The local cluster's data comes
    from `local` (its Service and kube slices) and counts only if this cluster is in
    `status.clusters`; an imported slice claiming the local cluster is ignored in its favour.
    """
    base = f"{imp.name}.{imp.namespace}.svc.{zone}".lower()
    rs = RecordSet()
    rs.names.add(base)
    remote = [s for s in slices if s.cluster != local_cluster]
    local_exports = local is not None and local_cluster in imp.clusters
    # Per-cluster endpoint views: (cluster, slice) pairs, the local cluster's from its kube slices.
    views: list[SliceSnap] = list(remote)
    publish_nr = local.publish_not_ready if local is not None else False
    if local_exports and local is not None:
        views.extend(SliceSnap(local_cluster, s.endpoints, s.ports) for s in local.slices)
    named = _named(imp.ports)

    if imp.type == HEADLESS:
        _headless(
            rs, base, views, named,
            host_of=lambda sl, ep: f"{endpoint_hostname(ep)}.{sl.cluster}.{base}",
            usable=lambda sl, ep: _usable(ep, publish_nr and sl.cluster == local_cluster),
            listed=_preferred(views, local_cluster, imp.locality, publish_nr),
        )
    else:
        _cluster_set_ip(rs, base, imp, remote, local if local_exports else None, local_cluster, named)

    if cluster_names:
        _cluster_names(rs, base, imp, remote, local if local_exports else None, local_cluster, publish_nr)
    for ip in imp.ips if ptr else ():
        try:
            rs.add(reverse_name(ip), PTR, [Ptr(base)])
        except ValueError:
            continue
    _add_names(rs, zone)
    return rs


def _preferred(
    views: Sequence[SliceSnap], local_cluster: str, locality: str, publish_nr: bool
) -> Callable[[SliceSnap], bool] | None:
    """Which clusters a headless name lists under a preference (None: every cluster): the
    preferred side (`local`: this cluster, `remote`: the others) while it has a usable endpoint,
    else every cluster, so a preference never empties the answer."""
    if locality not in ("local", "remote"):
        return None

    def on_side(v: SliceSnap) -> bool:
        return (v.cluster == local_cluster) == (locality == "local")

    if any(_usable(ep, publish_nr and v.cluster == local_cluster) for v in views if on_side(v) for ep in v.endpoints):
        return on_side
    return None


def _ready_cluster_ips(slices: Iterable[SliceSnap]) -> dict[str, list[str]]:
    """cluster → addresses of its ready endpoints (no-VIP slices carry the cluster's ClusterIP)."""
    out: dict[str, list[str]] = {}
    for s in slices:
        for ep in s.endpoints:
            if ep.ready and ep.addresses:
                out.setdefault(s.cluster, []).extend(ep.addresses)
    return out


def _local_has_ready(local: LocalService) -> bool:
    return any(_usable(ep, local.publish_not_ready) for s in local.slices for ep in s.endpoints)


def _cluster_set_ip(
    rs: RecordSet,
    base: str,
    imp: ImportSnap,
    remote: Sequence[SliceSnap],
    local: LocalService | None,
    local_cluster: str,
    named: Sequence[Port],
) -> None:
    if imp.ips:  # the VIP, no health filtering
        _add_addresses(rs, base, imp.ips)
    else:
        per_cluster = _ready_cluster_ips(remote)
        mine = [list(local.cluster_ips)] if local is not None and local.cluster_ips and _local_has_ready(local) else []
        others = [per_cluster[c] for c in sorted(per_cluster)]
        # Lighthouse prefers the local cluster by default (and so does `local`); `remote` prefers the
        # others; either falls back to the other side when the preferred one has nothing ready.
        ring = (others or mine) if imp.locality == "remote" else (mine or others)
        rs.add_ring(base, A, [_split_ips(r)[0] for r in ring])
        rs.add_ring(base, AAAA, [_split_ips(r)[1] for r in ring])
    if (base, A) not in rs.rrsets and (base, AAAA) not in rs.rrsets:
        return  # no address: SRV would point at nothing
    for port in named:
        rs.add(_srv_owner(port, base), SRV, _srv_set([(port.port, base)]))
    rs.add(base, SRV, _srv_set((p.port, base) for p in named))


def _headless(
    rs: RecordSet,
    base: str,
    views: Sequence[SliceSnap],
    named: Sequence[Port],
    *,
    host_of: Callable[[SliceSnap, Endpoint], str],
    usable: Callable[[SliceSnap, Endpoint], bool],
    listed: Callable[[SliceSnap], bool] | None = None,
) -> None:
    """Headless records of either zone: every usable endpoint under the service name, its own host
    name (the zones differ in its shape), and SRV per named port and for the service.

    `listed` narrows what the service name and its SRV records list (locality); every endpoint
    keeps its own host name, which names one pod and is asked for on purpose (StatefulSet peers)."""
    all_ips: list[str] = []
    hosts: dict[str, list[str]] = {}
    per_port: dict[Port, list[tuple[int, str]]] = {p: [] for p in named}
    for s in views:
        for ep in s.endpoints:
            if not usable(s, ep):
                continue
            host = host_of(s, ep)
            hosts.setdefault(host, []).extend(ep.addresses)
            if listed is not None and not listed(s):
                continue
            all_ips.extend(ep.addresses)
            for p in named:
                per_port[p].append((_slice_port(s, p), host))
    _add_addresses(rs, base, all_ips)
    for host, ips in hosts.items():
        _add_addresses(rs, host, ips)
    every: list[tuple[int, str]] = []
    for p, recs in per_port.items():
        rs.add(_srv_owner(p, base), SRV, _srv_set(recs))
        every.extend(recs)
    rs.add(base, SRV, _srv_set(every))


def _cluster_names(
    rs: RecordSet,
    base: str,
    imp: ImportSnap,
    remote: Sequence[SliceSnap],
    local: LocalService | None,
    local_cluster: str,
    publish_nr: bool,
) -> None:
    """Lighthouse's `<cluster>.<svc>...`: the cluster's ClusterIP (ClusterSetIP) or its endpoints."""
    per_cluster = _ready_cluster_ips(remote)
    for cluster, ips in per_cluster.items():
        _add_addresses(rs, f"{cluster}.{base}", ips)
    if local is None:
        return
    if imp.type == HEADLESS:
        ips = [a for s in local.slices for ep in s.endpoints if _usable(ep, publish_nr) for a in ep.addresses]
    else:
        ips = list(local.cluster_ips) if _local_has_ready(local) else []
    _add_addresses(rs, f"{local_cluster}.{base}", ips)


# --- the local (cluster.local) zone -----------------------------------------------------------------


def local_records(svc: LocalService, *, zone: str) -> RecordSet:
    """kube-dns records of one local Service: ClusterIP, headless endpoints and per-host names,
    SRV per named port, CNAME for ExternalName."""
    base = f"{svc.name}.{svc.namespace}.svc.{zone}".lower()
    rs = RecordSet()
    rs.names.add(base)
    named = _named(svc.ports)
    if svc.external_name:
        rs.cnames[base] = svc.external_name.rstrip(".").lower()
    elif svc.headless:
        _headless(
            rs, base, svc.slices, named,
            host_of=lambda _sl, ep: f"{endpoint_hostname(ep)}.{base}",
            usable=lambda _sl, ep: _usable(ep, svc.publish_not_ready),
        )
    elif svc.cluster_ips:
        _add_addresses(rs, base, svc.cluster_ips)
        for p in named:
            rs.add(_srv_owner(p, base), SRV, _srv_set([(p.port, base)]))
        rs.add(base, SRV, _srv_set((p.port, base) for p in named))
    _add_names(rs, zone)
    return rs


def service_records(
    imp: ImportSnap | None,
    slices: Sequence[SliceSnap],
    local: LocalService | None,
    *,
    local_cluster: str,
    zones: Sequence[str],
    local_zone: str | None,
    cluster_names: bool = False,
) -> RecordSet:
    """Every record one (namespace, name) contributes, across the clusterset zones and the local zone."""
    rs = RecordSet()
    if imp is not None:
        for i, zone in enumerate(zones):
            rs.update(
                clusterset_records(
                    imp,
                    slices,
                    local_cluster=local_cluster,
                    local=local,
                    zone=zone,
                    cluster_names=cluster_names,
                    ptr=i == 0,  # a VIP points back at its name in the first zone only
                )
            )
    if local is not None and local_zone:
        rs.update(local_records(local, zone=local_zone))
    return rs
