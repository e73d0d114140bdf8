"""Endpoints (core/v1): kubectl's columns (kube's printEndpoints).

Addresses are not refused for being loopback as kube's validation does: every address in a
local clusterset is one (the apiserver's own `default/kubernetes` endpoints included).
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import AGE_COLUMN, NAME_COLUMN, Column, age, col, dicts, more, name_of

Obj = dict[str, Any]

MAX_SHOWN = 3


def _host_port(ip: str, port: Any) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"  # net.JoinHostPort


def format_endpoints(obj: Obj) -> str:
    """kube's formatEndpoints: ip:port for every address of every port, the first three shown."""
    subsets = dicts(obj.get("subsets"))
    if not subsets:
        return "<none>"
    shown: list[str] = []
    count = 0
    for ss in subsets:
        addrs = [str(a.get("ip") or "") for a in dicts(ss.get("addresses"))]
        ports = dicts(ss.get("ports"))
        if not ports:  # headless services may have no ports
            count += len(addrs)
            shown.extend(addrs[: max(0, MAX_SHOWN - len(shown))])
            continue
        for p in ports:
            count += len(addrs)
            shown.extend(_host_port(a, p.get("port")) for a in addrs[: max(0, MAX_SHOWN - len(shown))])
    return more(shown, count, MAX_SHOWN)


COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Endpoints", desc="The set of all endpoints is the union of all subsets."),
    AGE_COLUMN,
]


class EndpointsStrategy(Strategy):
    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        return [name_of(obj), format_endpoints(obj), age(obj, now)]
