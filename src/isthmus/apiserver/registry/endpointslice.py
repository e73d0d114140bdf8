"""EndpointSlices (discovery.k8s.io): port defaults and kubectl's columns."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.defaulting import set_default
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    as_list,
    col,
    dicts,
    more,
    name_of,
)

Obj = dict[str, Any]


def default_endpointslice(obj: Obj) -> None:
    """discovery/v1 SetDefaults_EndpointPort."""
    for port in dicts(obj.get("ports")):
        if port.get("name") is None:
            port["name"] = ""
        set_default(port, "protocol", "TCP")


def _endpointslice(obj: Obj, now: float) -> list[Any]:
    ports = dicts(obj.get("ports"))
    if ports:
        shown = [
            str(p["port"]) if p.get("port") is not None else (str(p["name"]) if p.get("name") else "*")
            for p in ports[:3]
        ]
        ports_text = more(shown, len(ports), 3)
    else:
        ports_text = "<unset>"
    addrs = [str(a) for e in dicts(obj.get("endpoints")) for a in as_list(e.get("addresses"))]
    endpoints_text = more(addrs[:3], len(addrs), 3) if addrs else "<unset>"
    return [name_of(obj), str(obj.get("addressType") or ""), ports_text, endpoints_text, age(obj, now)]


COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("AddressType", desc="Type of address carried by this EndpointSlice."),
    col("Ports", desc="Ports of this EndpointSlice."),
    col("Endpoints", desc="Endpoints of this EndpointSlice."),
    AGE_COLUMN,
]


class EndpointSliceStrategy(Strategy):
    def default(self, obj: Obj) -> None:
        default_endpointslice(obj)

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return _endpointslice(obj, now)
