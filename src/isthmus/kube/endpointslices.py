"""Pure helpers over a cluster's own EndpointSlices, shared by every capability that publishes
endpoints elsewhere (discovery's broker slices, exposure's collected slices): which slices belong to
a Service, its endpoints deduplicated by address with kube's nil-condition meanings, and one port
definition per (name, protocol)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from lightkube.models.discovery_v1 import Endpoint, EndpointConditions, EndpointPort
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import KUBE_SERVICE_NAME_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE
from isthmus.api.mcsvc import SLICE_MANAGED_BY_VALUE

OWN_SLICE_EXCLUDED_MANAGERS: frozenset[str] = frozenset({MANAGED_BY_VALUE, SLICE_MANAGED_BY_VALUE})
"""managed-by values of slices Isthmus itself writes: never read back as a cluster's own endpoints."""


def own_slices(service_name: str, slices: Sequence[EndpointSlice]) -> list[EndpointSlice]:
    """The cluster's own IPv4 slices for the service, sorted by name.

    Our own imported copies (managed-by us) are never re-published, and slices labelled for another
    Service are ignored, so a sloppy caller cannot loop endpoints between clusters.
    """
    out = []
    for s in slices:
        labels = (s.metadata.labels if s.metadata is not None else None) or {}
        if labels.get(MANAGED_BY_LABEL) in OWN_SLICE_EXCLUDED_MANAGERS:
            continue
        if labels.get(KUBE_SERVICE_NAME_LABEL, service_name) != service_name:
            continue
        if s.addressType != "IPv4":
            continue
        out.append(s)
    return sorted(out, key=lambda s: (s.metadata.name or "") if s.metadata is not None else "")


def endpoint_ready(cond: EndpointConditions | None) -> bool:
    """kube: a nil `ready` means unknown and is to be read as ready."""
    return cond is None or cond.ready is not False


def _normalized_conditions(cond: EndpointConditions | None) -> EndpointConditions:
    """Explicit ready/serving/terminating, with kube's nil meanings (ready, serving=ready, not terminating)."""
    ready = endpoint_ready(cond)
    serving = cond.serving if cond is not None and cond.serving is not None else ready
    terminating = bool(cond.terminating) if cond is not None else False
    return EndpointConditions(ready=ready, serving=serving, terminating=terminating)


def _port_id(p: EndpointPort) -> tuple[str, str]:
    return (p.name or "", p.protocol or "TCP")


def _choose_ports(own: Sequence[EndpointSlice]) -> dict[tuple[str, str], EndpointPort]:
    """One definition per (name, protocol): the number backed by the most endpoints, then the lowest.

    Slices of one Service normally agree; they differ only while a named targetPort resolves to
    different container ports (e.g. mid rollout), which a single slice cannot express.
    """
    votes: dict[tuple[str, str], dict[int | None, int]] = {}
    first: dict[tuple[str, str, int | None], EndpointPort] = {}
    for s in own:
        weight = len(s.endpoints or [])
        for p in s.ports or []:
            key = _port_id(p)
            votes.setdefault(key, {})
            votes[key][p.port] = votes[key].get(p.port, 0) + weight
            first.setdefault((*key, p.port), p)
    chosen: dict[tuple[str, str], EndpointPort] = {}
    for key, counts in votes.items():
        number = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] or 0))[0][0]
        p = first[(*key, number)]
        chosen[key] = EndpointPort(name=key[0], protocol=key[1], port=number, appProtocol=p.appProtocol)
    return chosen


def _endpoint_rank(ep: Endpoint) -> tuple[bool, bool, bool]:
    """Which duplicate of an address to keep: ready, then serving, then not terminating."""
    cond = _normalized_conditions(ep.conditions)
    return (bool(cond.ready), bool(cond.serving), not cond.terminating)


def _ip_sort_key(address: str) -> tuple[int, int | str]:
    try:
        return (0, int(ipaddress.IPv4Address(address)))
    except ValueError:
        return (1, address)


def pod_endpoints(own: Sequence[EndpointSlice]) -> tuple[list[Endpoint], list[EndpointPort]]:
    chosen = _choose_ports(own)
    best: dict[str, Endpoint] = {}
    for s in own:
        defined = {(*_port_id(p), p.port) for p in s.ports or []}
        if any(chosen[(name, proto)].port != number for name, proto, number in defined):
            continue  # its endpoints listen elsewhere than the published ports
        for ep in s.endpoints or []:
            for address in ep.addresses or []:
                old = best.get(address)
                if old is None or _endpoint_rank(ep) > _endpoint_rank(old):
                    best[address] = Endpoint(
                        addresses=[address],
                        conditions=_normalized_conditions(ep.conditions),
                        hostname=ep.hostname,
                        nodeName=ep.nodeName,
                        zone=ep.zone,
                    )
    endpoints = [best[a] for a in sorted(best, key=_ip_sort_key)]
    ports = sorted(chosen.values(), key=lambda p: (p.name or "", p.protocol or "", p.port or 0))
    return endpoints, ports
