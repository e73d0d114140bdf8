"""Pure: an ExternalService and what the caches hold → the Forwarder and Gateway specs, the
ExternalService's source report, and what stands in the way.

The seed's flows: pods of a source Service connect to `<name>.external-services:<port>` (the
forwarder), which relays to the gateway naming the claim's source IP; the gateway connects to
`targetIP:port` from that address. Back: targetIP connects to `sourceIP:<service port>` on the
gateway, which relays to the forwarder, which connects to the source Service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from isthmus.api.egress import (
    GATEWAY_SERVICE,
    OPERATOR_NAMESPACE,
    ClaimPhase,
    ExternalService,
    ForwarderRule,
    ForwarderSpec,
    GatewayRule,
    GatewaySpec,
    ObjectRef,
    SourceIPClaim,
    SourceStatus,
    dataplane_name,
)


@dataclass(frozen=True)
class ServiceView:
    """What the operator needs of a source Service."""

    cluster_ip: str | None
    """None for a headless Service (no ingress for it)."""
    ports: tuple[tuple[str, int], ...]
    """(protocol, port) of each Service port."""
    ready_ips: tuple[str, ...]
    """Ready pod addresses (EndpointSlices): the count status shows."""
    pod_ips: tuple[str, ...] = ()
    """Every pod address of its EndpointSlices, ready or not, terminating too: who is admitted. Egress is
    identity, not load balancing: a pod opens its database connection before it is ready, and flushes
    to it while it drains (Cilium's, Antrea's and Calico's egress select pods by labels alike)."""


@dataclass
class Plan:
    forwarder: ForwarderSpec
    gateway: GatewaySpec
    sources: list[SourceStatus]
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) of what keeps a source from working: an unbound claim, a missing Service."""


def source_service(es: ExternalService, index: int) -> str:
    s = es.spec.sources[index].service
    return f"{s.namespace or es.namespace}/{s.name}"


def plan(
    es: ExternalService,
    claims: Mapping[str, SourceIPClaim],
    services: Mapping[str, ServiceView],
    *,
    forwarder_ips: Sequence[str],
    forwarder_address: str | None,
    gateway_address: str | None,
    gateway_ips: Sequence[str],
) -> Plan:
    """`claims` by name (the ExternalService's namespace), `services` by `ns/name`. The relays go to
    endpoints, not through Service addresses: `gateway_address` is the leading gateway's (the only
    ready endpoint of its Service), `forwarder_address` a ready forwarder pod's."""
    name = dataplane_name(es.namespace or "", es.name)
    gateway_ref = ObjectRef(namespace=OPERATOR_NAMESPACE, name=name)
    forwarder_ref = ObjectRef(namespace=OPERATOR_NAMESPACE, name=name)
    target = es.spec.target_ip
    fwd = ForwarderSpec(gateway_address=gateway_address, gateway_ips=sorted(gateway_ips))
    gw = GatewaySpec(external_service=ObjectRef(namespace=es.namespace, name=es.name))
    sources: list[SourceStatus] = []
    problems: list[tuple[str, str]] = []
    for i, source in enumerate(es.spec.sources):
        svc_key = source_service(es, i)
        claim_name = source.source_ip_claim_name or ""
        claim = claims.get(claim_name)
        svc = services.get(svc_key)
        address = claim.status.source_ip if claim is not None and claim.status.phase == ClaimPhase.BOUND else None
        sources.append(SourceStatus(service=svc_key, claim=claim_name or None, source_ip=address,
                                    endpoints=len(svc.ready_ips) if svc is not None else None))
        if claim is None:
            problems.append(("ClaimNotFound", f"SourceIPClaim {es.namespace}/{claim_name} not found"))
        elif address is None:
            problems.append(("ClaimNotBound", f"SourceIPClaim {es.namespace}/{claim_name} is "
                             f"{claim.status.phase.value if claim.status.phase else 'Pending'}"))
        if svc is None:
            problems.append(("ServiceNotFound", f"Service {svc_key} not found"))
        if address is None or svc is None:
            continue  # fail closed: no rule without a bound address and a known set of pods
        clients = sorted(svc.pod_ips)
        for port in es.spec.ports:
            fwd.egress_rules.append(ForwarderRule(
                protocol=port.protocol, source_ip=address, target_port=port.listen_port, destination_ip=target,
                destination_port=port.port, service=svc_key, client_ips=clients, gateway=gateway_ref))
            gw.egress_rules.append(GatewayRule(
                protocol=port.protocol, source_ip=address, destination_ip=target, destination_port=port.port,
                service=svc_key, forwarder=forwarder_ref, forwarder_ips=sorted(forwarder_ips), client_ips=clients))
        if svc.cluster_ip is None:
            continue
        for protocol, svc_port in svc.ports:
            fwd.ingress_rules.append(ForwarderRule(
                protocol=protocol, source_ip=address, target_port=svc_port, destination_ip=svc.cluster_ip,
                destination_port=svc_port, service=svc_key))
            gw.ingress_rules.append(GatewayRule(
                protocol=protocol, source_ip=address, target_port=svc_port, destination_ip=svc.cluster_ip,
                destination_port=svc_port, peer_ip=target, service=svc_key, forwarder=forwarder_ref,
                forwarder_address=forwarder_address))
    return Plan(fwd, gw, sources, problems)


def relay_address(endpoints: Sequence[str], port: int) -> str | None:
    """`host:port` of the first ready endpoint (None when there is none: no relay, fail closed)."""
    return f"{sorted(endpoints)[0]}:{port}" if endpoints else None


__all__ = ["GATEWAY_SERVICE", "Plan", "ServiceView", "plan", "relay_address", "source_service"]
