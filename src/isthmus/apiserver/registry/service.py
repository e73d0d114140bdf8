"""Services (kube's pkg/registry/core/service): DNS-1035 names, Go defaults, kubectl's columns."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.defaulting import ensure_dict, set_default
from isthmus.apiserver.registry.strategy import Strategy, fields
from isthmus.apiserver.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    as_list,
    col,
    dicts,
    dig,
    labels_string,
    lb_addresses,
    name_of,
)

Obj = dict[str, Any]


def default_service(obj: Obj) -> None:
    """SetDefaults_Service."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    set_default(spec, "type", "ClusterIP")
    set_default(spec, "sessionAffinity", "None")
    if spec["sessionAffinity"] == "ClientIP":
        cfg = ensure_dict(spec, "sessionAffinityConfig")
        cip = ensure_dict(cfg, "clientIP")
        set_default(cip, "timeoutSeconds", 10800)
    for port in dicts(spec.get("ports")):
        set_default(port, "protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    stype = spec["type"]
    if stype in ("NodePort", "LoadBalancer"):
        set_default(spec, "externalTrafficPolicy", "Cluster")
    if stype != "ExternalName":
        set_default(spec, "internalTrafficPolicy", "Cluster")
    if stype == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is None:
        spec["allocateLoadBalancerNodePorts"] = True


def _service(obj: Obj, now: float) -> list[Any]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    stype = str(spec.get("type") or "")
    cluster_ip = str(spec.get("clusterIP") or "") or "<none>"
    external = [str(x) for x in as_list(spec.get("externalIPs"))]
    if stype in ("ClusterIP", "NodePort"):
        ext = ",".join(external) if external else "<none>"
    elif stype == "LoadBalancer":
        lb = lb_addresses(dig(obj, "status", "loadBalancer", "ingress"))
        parts = ([lb] if lb else []) + external
        ext = ",".join(parts) if parts else "<pending>"
    elif stype == "ExternalName":
        ext = str(spec.get("externalName") or "")
    else:
        ext = "<unknown>"
    ports = []
    for p in dicts(spec.get("ports")):
        proto = p.get("protocol") or "TCP"
        if p.get("nodePort"):
            ports.append(f"{p.get('port')}:{p['nodePort']}/{proto}")
        else:
            ports.append(f"{p.get('port')}/{proto}")
    return [
        name_of(obj),
        stype,
        cluster_ip,
        ext,
        ",".join(ports) or "<none>",
        age(obj, now),
        labels_string(spec.get("selector")),
    ]


COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Type", desc="The type of the service."),
    col("Cluster-IP", desc="The IP address of the service."),
    col("External-IP", desc="The external IP address of the service."),
    col("Port(s)", desc="The ports the service listens on."),
    AGE_COLUMN,
    col(
        "Selector",
        desc="Route service traffic to pods with label keys and values matching this selector.",
        priority=1,
    ),
]


class ServiceStrategy(Strategy):
    name_rule = "dns1035"
    field_selectors = fields("spec.clusterIP", "spec.type")

    def default(self, obj: Obj) -> None:
        default_service(obj)

    def initial_status(self, obj: Obj) -> Obj | None:
        # kube's PrepareForCreate resets status; ServiceStatus.loadBalancer is a struct, always written.
        return {"loadBalancer": {}}

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _service(obj, now)
