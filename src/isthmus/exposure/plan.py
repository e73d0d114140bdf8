"""Pure logic of exposure: which Service ports a MultiClusterService exposes, the load balancer's
backends from collected EndpointSlices, and the conditions the broker summarises from the member
clusters' reports (docs/mcsvc.md "Status")."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from lightkube.resources.core_v1 import Service

from isthmus.api.base import Condition, new_condition
from isthmus.api.mcs import SOURCE_CLUSTER_LABEL
from isthmus.api.mcsvc import (
    MCS_LABEL,
    MCS_NAMESPACE_LABEL,
    SERVICE_PORTS_ANNOTATION,
    ClusterReport,
    ConditionType,
    ExposurePort,
    ExposureType,
    LoadBalancerStatus,
    MultiClusterService,
    Reason,
    named_providers,
    parse_service_ports,
    resolve,
)


def made_for(obj: Any) -> list[str]:
    """The `<namespace>/<name>` key of the MultiClusterService an object was made for (collected
    EndpointSlices, pools), from its labels; [] for anything else."""
    labels = (cast(dict[str, Any], obj.to_dict()).get("metadata") or {}).get("labels") or {}
    ns, name = labels.get(MCS_NAMESPACE_LABEL), labels.get(MCS_LABEL)
    return [f"{ns}/{name}"] if ns and name else []


ServicePortTuple = tuple[str, int, str]
"""(name, port, protocol) of a Service port."""


def _matches(want: ExposurePort, name: str | None, port: int | None) -> bool:
    return want.port == port and (not want.name or want.name == (name or ""))


def _describe(want: ExposurePort) -> str:
    return f"{want.name}:{want.port}" if want.name else str(want.port)


def missing_ports(wanted: Sequence[ExposurePort] | None, service: Service) -> list[str]:
    """spec.ports entries the Service has no port for (by number, and name when given)."""
    ports = (service.spec.ports if service.spec is not None else None) or []
    return [_describe(w) for w in wanted or [] if not any(_matches(w, p.name, p.port) for p in ports)]


def exposed_ports(wanted: Sequence[ExposurePort] | None, service: Service) -> list[ServicePortTuple]:
    """The Service ports exposed: those spec.ports selects, every one when it is empty."""
    ports = (service.spec.ports if service.spec is not None else None) or []
    return [(p.name or "", p.port, p.protocol or "TCP") for p in ports
            if not wanted or any(_matches(w, p.name, p.port) for w in wanted)]


# --- the load balancer's backends -----------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    cluster: str
    address: str
    port: int


@dataclass
class Backends:
    """What a provider balances over: per exposed Service port, the ready pod addresses of every
    provider cluster (the collected EndpointSlices)."""

    ports: list[ServicePortTuple] = field(default_factory=list)
    servers: dict[str, list[Server]] = field(default_factory=dict)
    """Service port name → servers (target port resolved per cluster)."""
    clusters: list[str] = field(default_factory=list)
    """Provider clusters that published endpoints."""


def backends(collected: Iterable[Mapping[str, Any]], providers: Iterable[str]) -> Backends:
    """Backends from collected EndpointSlices (dicts) of the given provider clusters."""
    allowed = set(providers)
    out = Backends()
    seen_ports: dict[tuple[str, str], ServicePortTuple] = {}
    for s in sorted(collected, key=lambda s: str(((s.get("metadata") or {}).get("labels") or {})
                                               .get(SOURCE_CLUSTER_LABEL, ""))):
        meta = s.get("metadata") or {}
        cluster = (meta.get("labels") or {}).get(SOURCE_CLUSTER_LABEL, "")
        if cluster not in allowed:
            continue
        out.clusters.append(cluster)
        service_ports = parse_service_ports((meta.get("annotations") or {}).get(SERVICE_PORTS_ANNOTATION))
        for sp in service_ports:
            seen_ports.setdefault((sp[0], sp[2]), sp)
        targets = {(p.get("name") or "", p.get("protocol") or "TCP"): p.get("port") for p in s.get("ports") or []}
        for name, _, proto in service_ports:
            target = targets.get((name, proto))
            if not target:
                continue
            for ep in s.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                for address in ep.get("addresses") or []:
                    out.servers.setdefault(name, []).append(Server(cluster, address, int(target)))
    out.ports = sorted(seen_ports.values(), key=lambda p: (p[1], p[2], p[0]))
    return out


# --- the broker's summary -------------------------------------------------------------------------


@dataclass
class Providers:
    """Who backs a MultiClusterService (docs/mcsvc.md "Providers")."""

    clusters: list[str]
    """The provider clusters: the named ones that are registered; by default, the clusters whose
    current report says they have the Service."""
    undecided: list[str] = field(default_factory=list)
    """By default only: live clusters that have not reported on this generation yet (they may have
    the Service): waited for, never a failure."""
    unknown: list[str] = field(default_factory=list)
    """Named clusters that are not registered (ignored, with a warning)."""
    named: bool = False


def resolve_providers(mcs: MultiClusterService, registered: Iterable[str], reports: Iterable[ClusterReport],
                      live: Collection[str] | None = None) -> Providers:
    """The provider clusters of `mcs`.

    Named (`providerClusters`): those of them that are registered; one that lacks the Service is a
    failed provider. Left to default: in our pull model the Service is not propagated, so "every
    cluster" means every cluster that has the Service, as each cluster's report says (Karmada's
    default means the same thing there, where the Service exists wherever it was propagated). A
    cluster without it is no provider, and no failure; one that has not answered yet is waited for
    while it is live (`live` None: every registered cluster is).
    """
    named = named_providers(mcs)
    if named:
        selected, unknown = resolve(named, registered)
        return Providers(selected, unknown=unknown, named=True)
    gen = mcs.metadata.generation or 0
    by_name = {r.name: r for r in reports}
    out = Providers([])
    for cluster in sorted(set(registered)):
        report = by_name.get(cluster)
        if report is None or (report.observed_generation or 0) < gen:
            if live is None or cluster in live:
                out.undecided.append(cluster)
        elif report.provider:
            out.clusters.append(cluster)
    return out


def summarize(mcs: MultiClusterService, providers: Sequence[str] | Providers, consumers: Sequence[str],
              lb: LoadBalancerStatus | None, lb_problem: str | None,
              reports: Sequence[ClusterReport] | None = None) -> list[Condition]:
    """The object's conditions from the member reports (`reports`, else status.clusters) and the
    provider's result.

    ServiceApplied: every provider cluster reports its Service applied (by default, see
    `resolve_providers`: at least one cluster has the Service and every live cluster has answered).
    EndpointSliceDispatched (CrossCluster): every consumer cluster imports the service.
    LoadBalancerReady (LoadBalancer): the provider reports an address. Ready: all of those. A
    condition whose type is not in spec.types is left out (the caller drops it).
    """
    gen = mcs.metadata.generation
    resolved = providers if isinstance(providers, Providers) else Providers(list(providers), named=True)
    reports = list(mcs.status.clusters if reports is None else reports)
    by_name = {r.name: r for r in reports}
    out: list[Condition] = []
    failed = [f"{c}: {by_name[c].message}" for c in resolved.clusters
              if c in by_name and by_name[c].service_applied is False]
    waiting = [c for c in resolved.clusters if c not in by_name or by_name[c].service_applied is None
               or (by_name[c].observed_generation or 0) < (gen or 0)] + resolved.undecided
    if failed:
        applied = new_condition(ConditionType.SERVICE_APPLIED, False, Reason.SERVICE_APPLIED_FAILED,
                                "; ".join(failed), gen)
    elif waiting:
        applied = new_condition(ConditionType.SERVICE_APPLIED, False, Reason.WAITING,
                                f"waiting for cluster(s) {', '.join(sorted(waiting))} to "
                                f"{'apply' if resolved.named else 'report on'} the service", gen)
    elif not resolved.clusters and resolved.named:
        applied = new_condition(ConditionType.SERVICE_APPLIED, False, Reason.SERVICE_APPLIED_FAILED,
                                "no provider cluster: none of the named clusters is registered", gen)
    elif not resolved.clusters:
        applied = new_condition(ConditionType.SERVICE_APPLIED, False, Reason.WAITING,
                                f"no cluster has Service {mcs.namespace}/{mcs.name}: it is exposed from every "
                                "cluster where it appears (providerClusters left to default)", gen)
    else:
        applied = new_condition(ConditionType.SERVICE_APPLIED, True, Reason.SERVICE_APPLIED_SUCCEED,
                                f"the Service is exposed from {', '.join(resolved.clusters)}", gen)
    out.append(applied)
    if mcs.has_type(ExposureType.CROSS_CLUSTER):
        missing = [c for c in consumers if not (c in by_name and by_name[c].imported)]
        if not consumers:
            out.append(new_condition(ConditionType.ENDPOINT_SLICE_DISPATCHED, False, Reason.DISPATCH_FAILED,
                                     "no consumer cluster: none of the named clusters is registered", gen))
        elif missing:
            why = [by_name[c].message for c in missing if c in by_name and by_name[c].reason == "NamespaceNotFound"]
            out.append(new_condition(ConditionType.ENDPOINT_SLICE_DISPATCHED, False, Reason.WAITING,
                                     f"not imported yet in {', '.join(missing)}" + (f" ({'; '.join(why)})"
                                                                                     if why else ""), gen))
        else:
            out.append(new_condition(ConditionType.ENDPOINT_SLICE_DISPATCHED, True, Reason.DISPATCH_SUCCEED,
                                     f"imported in {', '.join(consumers)}", gen))
    if mcs.has_type(ExposureType.LOAD_BALANCER):
        addresses = [i.ip or i.hostname for i in (lb.ingress if lb is not None else None) or [] if i.ip or i.hostname]
        if lb_problem:
            out.append(new_condition(ConditionType.LOAD_BALANCER_READY, False, Reason.LB_FAILED, lb_problem, gen))
        elif addresses:
            out.append(new_condition(ConditionType.LOAD_BALANCER_READY, True, Reason.LB_READY,
                                     f"the load balancer serves at {', '.join(a for a in addresses if a)}", gen))
        else:
            out.append(new_condition(ConditionType.LOAD_BALANCER_READY, False, Reason.LB_PENDING,
                                     "the load balancer has no address yet (waiting for provider clusters to "
                                     "publish ready endpoints, then for the provider)", gen))
    bad = [c for c in out if c.status != "True"]
    if bad:
        out.append(new_condition(ConditionType.READY, False, Reason.NOT_READY,
                                 "; ".join(f"{c.type}: {c.message}" for c in bad), gen))
    else:
        out.append(new_condition(ConditionType.READY, True, Reason.READY, "every part is ready", gen))
    return out


def show_clusters(selected: Sequence[str], named: Sequence[str]) -> str:
    """The printer column: the resolved clusters, `*` when none was named (every cluster)."""
    text = ",".join(selected) or "<none>"
    return text if named else f"* ({text})" if selected else "* (<none>)"
