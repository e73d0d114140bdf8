"""ClusterIP and NodePort allocation: what kube-apiserver's Service REST storage does on create.

A real apiserver fills ``spec.clusterIP`` and ``nodePort`` when it stores the Service; ours
stores Services as given, so this controller fills them right after, from the cluster's
service CIDR and NodePort range. A value the user chose is kept when it is free and inside
the range; otherwise the Service is left as it is and a Warning Event says why (the real
apiserver would have refused the write; here the object already exists, so we report where
the user looks). Values are released when the Service is deleted or no longer needs them
(type change, headless).
"""

from __future__ import annotations

import copy
import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Service

from isthmus.local.kubelite import FIELD_MANAGER
from isthmus.local.kubelite.ipam import IPPool, PoolFull, PortPool
from isthmus.runtime import Controller, EventRecorder, Informer, Result

__all__ = [
    "CLUSTER_IP_NOT_ALLOCATED",
    "NODE_PORT_NOT_ALLOCATED",
    "ServiceAllocation",
    "ServiceIPController",
    "assign_service",
]

log = logging.getLogger(__name__)

CLUSTER_IP_NOT_ALLOCATED = "ClusterIPNotAllocated"
NODE_PORT_NOT_ALLOCATED = "NodePortNotAllocated"

_IP_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
FULL_RETRY_SECONDS = 30.0


@dataclass
class ServiceAllocation:
    """What :func:`assign_service` decided: a new ``spec`` to write (None: unchanged), warnings
    as (reason, message), and whether a pool was full (so look again later)."""

    spec: dict[str, Any] | None = None
    warnings: list[tuple[str, str]] = field(default_factory=list)
    full: bool = False


def service_type(spec: Mapping[str, Any]) -> str:
    return str(spec.get("type") or "ClusterIP")


def assign_service(svc: Mapping[str, Any], key: str, ips: IPPool, ports: PortPool) -> ServiceAllocation:
    """Bring the pools and the Service ``svc`` (a dict) in line; ``key`` owns the allocations.

    Mutates the pools (reserve what the Service holds, allocate what it lacks, release what it
    no longer needs) and returns the spec to write back, if it changed.
    """
    spec: dict[str, Any] = copy.deepcopy(dict(svc.get("spec") or {}))
    out = ServiceAllocation()
    stype = service_type(spec)
    if stype not in _IP_TYPES:  # ExternalName (or unknown): no virtual IP, no node ports
        ips.release_owner(key)
        ports.release_owner(key)
        return out

    cip = spec.get("clusterIP")
    if cip == "None":  # headless
        ips.release_owner(key)
        _default_families(spec)
    elif cip:
        res = ips.reserve(str(cip), key)
        if res.ok:
            _release_others(ips, key, str(cip))
            if not spec.get("clusterIPs"):
                _set_ip(spec, str(cip))
        else:
            ips.release_owner(key)
            if res.outside:
                msg = f"spec.clusterIP {cip} is outside the service CIDR {ips.network}; it is left as is and not allocated"
            else:
                msg = f"spec.clusterIP {cip} is already allocated to Service {res.owner}; it is left as is"
            out.warnings.append((CLUSTER_IP_NOT_ALLOCATED, msg))
    else:
        try:
            ip = ips.allocate(key)
        except PoolFull:
            out.full = True
            out.warnings.append(
                (CLUSTER_IP_NOT_ALLOCATED, f"the service CIDR {ips.network} has no free address left")
            )
        else:
            _release_others(ips, key, ip)
            _set_ip(spec, ip)

    port_list = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    if stype == "ClusterIP":
        ports.release_owner(key)
        for p in port_list:  # kube drops node ports when the type no longer has them
            p.pop("nodePort", None)
    else:
        allocate_new = not (stype == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is False)
        used: set[int] = set()
        for p in port_list:
            np = p.get("nodePort")
            if not np:
                continue
            res = ports.reserve(int(np), key)
            if res.ok:
                used.add(int(np))
                continue
            where = f"port {p.get('name') or p.get('port')}"
            if res.outside:
                msg = f"nodePort {np} of {where} is outside the node port range {ports.lo}-{ports.hi}"
            else:
                msg = f"nodePort {np} of {where} is already allocated to Service {res.owner}"
            out.warnings.append((NODE_PORT_NOT_ALLOCATED, msg + "; it is left as is"))
        if allocate_new:
            for p in port_list:
                if p.get("nodePort"):
                    continue
                try:
                    np = ports.allocate(key, avoid=used)
                except PoolFull:
                    out.full = True
                    out.warnings.append(
                        (NODE_PORT_NOT_ALLOCATED, f"the node port range {ports.lo}-{ports.hi} is full")
                    )
                    break
                used.add(np)
                p["nodePort"] = np
        for np in ports.held(key):
            if np not in used:
                ports.release(np, key)

    if spec != (svc.get("spec") or {}):
        out.spec = spec
    return out


CLUSTER_FAMILY = "IPv4"
"""The one IP family of a kube-lite cluster (its service CIDR, IPPool, is IPv4)."""


def _set_ip(spec: dict[str, Any], ip: str) -> None:
    spec["clusterIP"] = ip
    spec["clusterIPs"] = [ip]
    spec["ipFamilies"] = [CLUSTER_FAMILY]
    # kube keeps a PreferDualStack asked of a single-stack cluster (the mcs-api conformance Service
    # asks it); only an unset policy defaults.
    if not spec.get("ipFamilyPolicy"):
        spec["ipFamilyPolicy"] = "SingleStack"


def _default_families(spec: dict[str, Any]) -> None:
    """kube's defaults for a headless Service, which gets no ClusterIP to take them from: the policy
    SingleStack, or RequireDualStack without a selector (kube's "headless without selectors"), and
    the cluster's family. Consumers read them (the MCS ServiceImport's ipFamilies come from them).
    A family the user asked for is kept."""
    if not spec.get("ipFamilyPolicy"):
        spec["ipFamilyPolicy"] = "SingleStack" if spec.get("selector") else "RequireDualStack"
    if not spec.get("ipFamilies"):
        spec["ipFamilies"] = [CLUSTER_FAMILY]


def _release_others(ips: IPPool, key: str, keep: str) -> None:
    for ip in ips.held(key):
        if ip != keep:
            ips.release(ip, key)


def reserve_existing(services: list[Mapping[str, Any]], ips: IPPool, ports: PortPool) -> None:
    """Rebuild the pools from stored Services, oldest first (the first holder of a value keeps it)."""

    def created(s: Mapping[str, Any]) -> str:
        return str((s.get("metadata") or {}).get("creationTimestamp") or "")

    for svc in sorted(services, key=created):
        meta = svc.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        spec = svc.get("spec") or {}
        stype = service_type(spec)
        if stype not in _IP_TYPES:
            continue
        cip = spec.get("clusterIP")
        if cip and cip != "None":
            ips.reserve(str(cip), key)
        if stype != "ClusterIP":
            for p in spec.get("ports") or []:
                if isinstance(p, dict) and p.get("nodePort"):
                    ports.reserve(int(p["nodePort"]), key)


class ServiceIPController:
    """Keyed by Service; the pools live here and are rebuilt by :meth:`rebuild` before :meth:`run`."""

    def __init__(
        self,
        client: AsyncClient,
        services: Informer[Service],
        recorder: EventRecorder,
        *,
        service_cidr: str,
        node_ports: tuple[int, int],
        workers: int = 2,
    ) -> None:
        self.client = client
        self.services = services
        self.recorder = recorder
        self.ips = IPPool(ipaddress.IPv4Network(service_cidr))  # validated by the caller (loopback or not, per mode)
        self.ports = PortPool(*node_ports)
        self.controller = Controller("kubelite-service-ips", self.reconcile, workers=workers)
        self.controller.watch(services)

    def rebuild(self) -> None:
        """Reserve every allocation stored in the (synced) cache; call before :meth:`run`."""
        reserve_existing([s.to_dict() for s in self.services.cache.list()], self.ips, self.ports)
        log.info(
            "service allocations rebuilt",
            extra={"cluster_ips": len(self.ips), "node_ports": len(self.ports)},
        )

    async def run(self) -> None:
        await self.controller.run()

    async def reconcile(self, key: str) -> Result | None:
        svc = self.services.cache.get(key)
        if svc is None:
            self.ips.release_owner(key)
            self.ports.release_owner(key)
            return None
        data = svc.to_dict()
        plan = assign_service(data, key, self.ips, self.ports)
        for reason, message in plan.warnings:
            self.recorder.warning(svc, reason, message)
        if plan.spec is not None:
            data["spec"] = plan.spec
            data["metadata"].pop("managedFields", None)
            await self.client.replace(cast(Service, Service.from_dict(data)), field_manager=FIELD_MANAGER)
            log.info("service allocated", extra={"key": key, "clusterIP": plan.spec.get("clusterIP")})
        return Result(requeue_after=FULL_RETRY_SECONDS) if plan.full else None
