"""diagnose never dials the local clusterset's runc-mode addresses from the host: they live in
network namespaces of their own, and from the host a packet to one would leave the machine."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from isthmus.diagnose.checks import _not_from_here


def target(server: str) -> Any:
    return SimpleNamespace(server=server)


def test_a_local_api_server_with_addresses_elsewhere_is_not_probed_from_here() -> None:
    local = target("https://127.0.0.1:20208")
    assert _not_from_here(local, "10.255.0.11")  # runc mode: a node address inside the clusterset
    assert _not_from_here(local, "10.240.0.1")   # a ClusterSet IP
    assert not _not_from_here(local, "127.0.0.1")  # process mode: everything on loopback is probed
    assert not _not_from_here(local, "127.240.0.1")


def test_a_real_cluster_is_probed_as_before() -> None:
    cluster_ip = "10.96.0.10"  # (nothing is dialled: this only decides)
    assert not _not_from_here(target("https://203.0.113.10:6443"), cluster_ip)
    by_name = target("https://api.example.com:6443")
    assert not _not_from_here(by_name, cluster_ip)
