"""The web view shows both VIPs of a dual-stack import (IPv4 first) and its ipFamilies."""

from __future__ import annotations

from isthmus.ui.kinds import MEMBER_ROLE
from isthmus.ui.model import Store, build_view


def test_dual_stack_import_shows_both_vips_and_its_families() -> None:
    s = Store()
    for name in ("c1", "c2"):
        s.add_cluster(name, MEMBER_ROLE, f"https://127.0.0.1:{name[1]}")
    for conn in s.connections.values():
        conn.synced = True
    for c in ("c1", "c2"):
        s.put(c, "ServiceImport", {
            "kind": "ServiceImport", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"type": "ClusterSetIP", "ips": ["fd00:243::5", "243.0.0.5"], "ipFamilies": ["IPv6", "IPv4"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        })
    svc = build_view(s)["services"]["shop/web"]
    assert svc["vip"] == ["243.0.0.5", "fd00:243::5"]
    assert svc["ipFamilies"] == ["IPv6", "IPv4"]
    assert svc["importers"]["c1"]["vip"] == ["fd00:243::5", "243.0.0.5"]
    assert svc["importers"]["c1"]["ipFamilies"] == ["IPv6", "IPv4"]
