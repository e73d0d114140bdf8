"""Services (kube's pkg/registry/core/service): DNS-1035 names, Go defaults, kubectl's columns, and
the parts of kube's ValidateService that the load balancers, proxies and DNS read (type, ports,
selector, trafficDistribution), in kube's words: a port named `http\n` or a selector value `web\n` never reaches them."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.apimachinery import validation as v
from isthmus.apiserver.apimachinery.errors import cause
from isthmus.apiserver.registry.defaulting import ensure_dict, set_default
from isthmus.apiserver.registry.strategy import Strategy, fields
from isthmus.apiserver.registry.table import (
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
Cause = dict[str, str]
SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
PROTOCOLS = ("SCTP", "TCP", "UDP")
TRAFFIC_DISTRIBUTIONS = ("PreferClose", "PreferSameZone", "PreferSameNode")
"""kube's validateServiceTrafficDistribution, in its order: PreferSameZone and PreferSameNode joined
PreferClose with PreferSameTrafficDistribution (alpha in 1.33, on by default from 1.34, locked in
1.35); a value outside them would reach DNS and the proxy as a preference nobody can honour."""


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


def _port_number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def validate_service_spec(spec: Obj) -> list[Cause]:
    """kube's ValidateService for type, ports, selector and trafficDistribution, at `spec` (after
    defaulting)."""
    errs: list[Cause] = []
    stype = spec.get("type") or "ClusterIP"  # kube's defaulting gives every Service a type
    if stype not in SERVICE_TYPES:
        errs.append(v.not_supported("spec.type", stype, SERVICE_TYPES))
    ports = dicts(spec.get("ports"))
    if not ports and spec.get("clusterIP") != "None" and stype != "ExternalName":
        errs.append(v.required("spec.ports"))
    names: set[str] = set()
    require_name = len(ports) > 1  # kube: a port of a multi-port Service must be named
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        name = port.get("name")
        if require_name and not (isinstance(name, str) and name):
            errs.append(v.required(f"{path}.name"))
        if isinstance(name, str) and name:
            errs += v.invalid_each(f"{path}.name", name, v.is_dns1123_label(name))
            if name in names:
                errs.append(cause(f"{path}.name", f"Duplicate value: {v.go_value(name)}", "FieldValueDuplicate"))
            names.add(name)
        number = _port_number(port.get("port"))
        errs += [v.invalid(f"{path}.port", number or 0, m) for m in v.is_valid_port_num(number or 0)]
        protocol = port.get("protocol")
        if protocol not in PROTOCOLS:
            errs.append(v.not_supported(f"{path}.protocol", protocol, PROTOCOLS))
        target = port.get("targetPort")
        if isinstance(target, str):
            errs += v.invalid_each(f"{path}.targetPort", target, v.is_valid_port_name(target))
        elif (target_number := _port_number(target)) is not None:
            errs += [v.invalid(f"{path}.targetPort", target_number, m) for m in v.is_valid_port_num(target_number)]
    selector = spec.get("selector")
    if isinstance(selector, dict):
        for key, value in selector.items():
            errs += v.invalid_each("spec.selector", str(key), v.is_qualified_name(str(key)))
            if isinstance(value, str):
                errs += v.invalid_each("spec.selector", value, v.is_valid_label_value(value))
    distribution = spec.get("trafficDistribution")
    if distribution is not None and distribution not in TRAFFIC_DISTRIBUTIONS:
        errs.append(v.not_supported("spec.trafficDistribution", distribution, TRAFFIC_DISTRIBUTIONS))
    # The same protocol and port twice: the schema's list-map keys refuse it already (openapi/schema.py).
    return errs


class ServiceStrategy(Strategy):
    name_rule = "dns1035"
    field_selectors = fields("spec.clusterIP", "spec.type")

    def default(self, obj: Obj) -> None:
        default_service(obj)

    def validate(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec")
        return validate_service_spec(spec if isinstance(spec, dict) else {})

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        # An unchanged spec is not judged again: a status write (a load balancer's address) must
        # reach a Service stored before this validation existed.
        return [] if new.get("spec") == old.get("spec") else self.validate(new)

    def initial_status(self, obj: Obj) -> Obj | None:
        # kube's PrepareForCreate resets status; ServiceStatus.loadBalancer is a struct, always written.
        return {"loadBalancer": {}}

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _service(obj, now)
