"""Ingresses and IngressClasses (networking.k8s.io): only their columns differ from the generic."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    as_list,
    col,
    dicts,
    dig,
    lb_addresses,
    name_of,
)

Obj = dict[str, Any]


def _ingress(obj: Obj, now: float) -> list[Any]:
    cls = str(dig(obj, "spec", "ingressClassName") or "") or "<none>"
    rules = dicts(dig(obj, "spec", "rules"))
    hosts: list[str] = []
    more = False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        if not more and rule.get("host"):
            hosts.append(str(rule["host"]))
    hosts_text = "*" if not hosts else (",".join(hosts) + (f" + {len(rules) - 3} more..." if more else ""))
    address = lb_addresses(dig(obj, "status", "loadBalancer", "ingress"))
    ports = "80, 443" if as_list(dig(obj, "spec", "tls")) else "80"
    return [name_of(obj), cls, hosts_text, address, ports, age(obj, now)]


def _ingressclass(obj: Obj, now: float) -> list[Any]:
    params = dig(obj, "spec", "parameters")
    text = "<none>"
    if isinstance(params, dict):
        text = str(params.get("kind") or "")
        if params.get("apiGroup"):
            text += "." + str(params["apiGroup"])
        text += "/" + str(params.get("name") or "")
    return [name_of(obj), str(dig(obj, "spec", "controller") or ""), text, age(obj, now)]


INGRESS_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Class", desc="The name of the IngressClass resource that should be used."),
    col("Hosts", desc="Hosts that incoming requests are matched against before the ingress rule"),
    col("Address", desc="Address is a list containing ingress points for the load-balancer"),
    col("Ports", desc="Ports of TLS configurations that open"),
    AGE_COLUMN,
]

INGRESS_CLASS_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Controller", desc="Controller that is responsible for handling this class"),
    col("Parameters", desc="A reference to a resource with additional parameters"),
    AGE_COLUMN,
]


class IngressStrategy(Strategy):
    def initial_status(self, obj: Obj) -> Obj | None:
        # kube's PrepareForCreate resets status; IngressStatus.loadBalancer is a struct, always written.
        return {"loadBalancer": {}}

    def table_columns(self) -> list[Column]:
        return INGRESS_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _ingress(obj, now)


class IngressClassStrategy(Strategy):
    def table_columns(self) -> list[Column]:
        return INGRESS_CLASS_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _ingressclass(obj, now)
