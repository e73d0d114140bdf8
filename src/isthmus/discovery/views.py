"""Read models behind `isthmus show clusters|exports|imports`: rows a table or JSON prints as is."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from lightkube import ALL_NS, AsyncClient

from isthmus.api.base import Condition, find_condition, format_time, now
from isthmus.api.mcs import (
    AGENT_NAMESPACE,
    HEARTBEAT_ANNOTATION,
    SERVICE_DISCOVERY_NAME,
    USE_CLUSTERSET_IP_ANNOTATION,
    Cluster,
    ConditionType,
    ServiceDiscovery,
    ServiceExport,
    ServiceImport,
)
from isthmus.clusterset.broker import get_broker
from isthmus.clusterset.control import get_if_kind, list_if_kind
from isthmus.kube.helpers import list_all

MESSAGE_SEPARATOR = "; "
"""How `api.mcs.conflict_condition` joins the messages of several conflicts."""


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# --- clusters -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterRow:
    cluster_id: str
    cidrs: list[str]
    clusterset_ip_enabled: bool
    """The cluster's default for exports without the annotation (its own, else the broker's)."""
    enabled_source: Literal["cluster", "broker"]
    joined_at: datetime | None
    heartbeat: datetime | None
    ready: str | None
    """Status of the Cluster's Ready condition (the agent's), None when never reported."""

    def to_dict(self, at: datetime | None = None) -> dict[str, Any]:
        at = at or now()
        return {
            "clusterID": self.cluster_id,
            "clustersetIPCIDR": self.cidrs,
            "clustersetIPEnabled": self.clusterset_ip_enabled,
            "clustersetIPEnabledSource": self.enabled_source,
            "joinedAt": format_time(self.joined_at) if self.joined_at else None,
            "heartbeat": format_time(self.heartbeat) if self.heartbeat else None,
            "heartbeatAgeSeconds": int((at - self.heartbeat).total_seconds()) if self.heartbeat else None,
            "ready": self.ready,
        }


async def cluster_rows(broker_client: AsyncClient, namespace: str) -> list[ClusterRow]:
    """Every member cluster as the broker knows it, sorted by ID."""
    broker = await get_broker(broker_client, namespace)
    rows = []
    for c in sorted(await list_all(broker_client, Cluster, namespace=namespace), key=lambda c: c.name):
        ready = find_condition(c.status.conditions, "Ready")
        own = c.spec.clusterset_ip_enabled
        rows.append(ClusterRow(
            cluster_id=c.name,
            cidrs=list(c.spec.clusterset_ip_cidr),
            clusterset_ip_enabled=own if own is not None else broker.spec.clusterset_ip_enabled,
            enabled_source="cluster" if own is not None else "broker",
            joined_at=c.spec.joined_at,
            heartbeat=_parse_time((c.metadata.annotations or {}).get(HEARTBEAT_ANNOTATION)),
            ready=ready.status if ready else None,
        ))
    return rows


# --- exports ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConditionView:
    status: str
    reason: str
    message: str

    @classmethod
    def of(cls, cond: Condition | None) -> ConditionView | None:
        return None if cond is None else cls(str(cond.status), str(cond.reason), cond.message or "")

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason, "message": self.message}


def _conflict_reasons(cond: Condition | ConditionView | None) -> list[str]:
    """The reasons of a Conflict=True condition, one per conflict kind (they are comma-joined)."""
    if cond is None or str(cond.status) != "True":
        return []
    return [r.strip() for r in str(cond.reason).split(",") if r.strip()]


@dataclass(frozen=True)
class ExportRow:
    namespace: str
    name: str
    use_clusterset_ip: str | None
    """The annotation's value as written (None: the cluster's setting applies)."""
    cluster_default: bool | None
    """This cluster's VIP setting for exports without the annotation (None: not joined)."""
    service_ips: list[str] | None
    """The service's VIP as this cluster imports it ([]: none; None: no ServiceImport here yet)."""
    valid: ConditionView | None
    ready: ConditionView | None
    conflict: ConditionView | None
    created: datetime | None

    def vip(self) -> str:
        """Whether the service has a VIP: the VIP, `none`, or `-` before it is imported."""
        if self.service_ips is None:
            return "-"
        return ", ".join(self.service_ips) or "none"

    def wants_vip(self) -> str:
        """This cluster's wish: the annotation, else the cluster's default (marked as such)."""
        if self.use_clusterset_ip is not None:
            return self.use_clusterset_ip
        if self.cluster_default is None:
            return "-"
        return f"{str(self.cluster_default).lower()} (default)"

    def conflict_reasons(self) -> list[str]:
        return _conflict_reasons(self.conflict)

    def problems(self) -> list[str]:
        """One line per thing that is wrong: unhappy Valid/Ready messages, then each conflict."""
        out = []
        for label, cond, happy in (("Valid", self.valid, "True"), ("Ready", self.ready, "True")):
            if cond is not None and cond.status != happy and cond.message:
                out.append(f"{label}: {cond.message}")
        if self.conflict is not None and self.conflict.status == "True":
            out += [f"Conflict: {m.strip()}" for m in self.conflict.message.split(MESSAGE_SEPARATOR) if m.strip()]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "useClustersetIP": self.use_clusterset_ip,
            "clusterClustersetIPEnabled": self.cluster_default,
            "serviceIPs": self.service_ips,
            "valid": self.valid.to_dict() if self.valid else None,
            "ready": self.ready.to_dict() if self.ready else None,
            "conflict": self.conflict.to_dict() if self.conflict else None,
            "creationTimestamp": format_time(self.created) if self.created else None,
        }


def _scope(namespace: str | None) -> str:
    return namespace if namespace is not None else ALL_NS


async def export_rows(client: AsyncClient, namespace: str | None) -> list[ExportRow]:
    """This cluster's ServiceExports (one namespace, or every one with namespace=None), each with
    the VIP its service has (from this cluster's ServiceImport) and this cluster's default."""
    items = cast(list[ServiceExport], await list_if_kind(client, ServiceExport, _scope(namespace)))
    imports = {
        (i.namespace or "", i.name): list(i.spec.ips or [])
        for i in cast(list[ServiceImport], await list_if_kind(client, ServiceImport, _scope(namespace)))
    }
    sd = cast(
        ServiceDiscovery | None, await get_if_kind(client, ServiceDiscovery, SERVICE_DISCOVERY_NAME, AGENT_NAMESPACE)
    )
    rows = []
    for e in sorted(items, key=lambda e: (e.namespace or "", e.name)):
        conds = e.status.conditions
        rows.append(ExportRow(
            namespace=e.namespace or "",
            name=e.name,
            use_clusterset_ip=(e.metadata.annotations or {}).get(USE_CLUSTERSET_IP_ANNOTATION),
            cluster_default=sd.spec.clusterset_ip_enabled if sd is not None else None,
            service_ips=imports.get((e.namespace or "", e.name)),
            valid=ConditionView.of(find_condition(conds, ConditionType.VALID)),
            ready=ConditionView.of(find_condition(conds, ConditionType.READY)),
            conflict=ConditionView.of(find_condition(conds, ConditionType.CONFLICT)),
            created=e.metadata.creation_timestamp,
        ))
    return rows


# --- imports ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportRow:
    namespace: str
    name: str
    type: str
    ips: list[str]
    """The ClusterSet IPs, one per family in `ip_families` order (dual-stack: an IPv4 and an IPv6)."""
    clusters: list[str]
    ports: list[dict[str, Any]]
    conflicts: list[str]
    """Conflict reasons when this cluster's own export of the service is in conflict (else empty):
    the service then behaves as the oldest export says, maybe not as this cluster's Service."""
    session_affinity: str = "None"
    created: datetime | None = None
    ready: ConditionView | None = None
    """The ServiceImport's Ready condition (v1beta1; None before the agent wrote one)."""
    ip_families: list[str] = field(default_factory=list)
    """The import's spec.ipFamilies: the families it is served over (headless imports too)."""

    def ready_text(self) -> str:
        """`True`, or the status with the reason that explains it (`False IPFamilyNotSupported`)."""
        if self.ready is None:
            return "-"
        if self.ready.status == "True":
            return "True"
        return f"{self.ready.status} {self.ready.reason}".strip()

    def dns_name(self) -> str:
        return f"{self.name}.{self.namespace}.svc.clusterset.local"

    def port_text(self) -> str:
        parts = []
        for p in self.ports:
            text = f"{p['port']}/{p.get('protocol', 'TCP')}"
            parts.append(f"{p['name']}:{text}" if p.get("name") else text)
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "type": self.type,
            "ips": self.ips,
            "ipFamilies": self.ip_families,
            "clusters": self.clusters,
            "ports": self.ports,
            "conflicts": self.conflicts,
            "sessionAffinity": self.session_affinity,
            "ready": self.ready.to_dict() if self.ready else None,
            "dnsName": self.dns_name(),
            "creationTimestamp": format_time(self.created) if self.created else None,
        }


async def import_rows(client: AsyncClient, namespace: str | None) -> list[ImportRow]:
    """This cluster's ServiceImports (the agent's copies of the aggregates), each marked with the
    conflicts of this cluster's own export of the service."""
    items = cast(list[ServiceImport], await list_if_kind(client, ServiceImport, _scope(namespace)))
    conflicts = {
        (e.namespace or "", e.name): _conflict_reasons(find_condition(e.status.conditions, ConditionType.CONFLICT))
        for e in cast(list[ServiceExport], await list_if_kind(client, ServiceExport, _scope(namespace)))
    }
    rows = []
    for i in sorted(items, key=lambda i: (i.namespace or "", i.name)):
        rows.append(ImportRow(
            namespace=i.namespace or "",
            name=i.name,
            type=str(i.spec.type),
            ips=list(i.spec.ips or []),
            clusters=sorted(c.cluster for c in i.status.clusters),
            ports=[p.to_dict() for p in i.spec.ports],
            conflicts=conflicts.get((i.namespace or "", i.name), []),
            session_affinity=str(i.spec.session_affinity or "None"),
            created=i.metadata.creation_timestamp,
            ready=ConditionView.of(find_condition(i.status.conditions, ConditionType.READY)),
            ip_families=list(i.spec.ip_families or []),
        ))
    return rows
