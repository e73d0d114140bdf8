"""The clusterset.local stub zone edit of a CoreDNS Corefile: idempotent, reversible, others' blocks kept."""

from __future__ import annotations

import pytest

from isthmus.mcs.coredns import CorefileError, add_stub_zone, remove_stub_zone

K3S = """.:53 {
    errors
    health
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
    }
    hosts /etc/coredns/NodeHosts {
      ttl 60
      reload 15s
      fallthrough
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
    import /etc/coredns/custom/*.override
}
import /etc/coredns/custom/*.server
"""
ZONE = "clusterset.local"


def test_add_is_idempotent_and_remove_restores_the_text_exactly() -> None:
    added = add_stub_zone(K3S, ZONE, ["10.43.0.53"])
    assert added.startswith(K3S) and added.endswith("clusterset.local:53 {\n    forward . 10.43.0.53\n}\n")
    assert add_stub_zone(added, ZONE, ["10.43.0.53"]) == added
    assert remove_stub_zone(added, ZONE) == K3S
    assert remove_stub_zone(K3S, ZONE) == K3S


def test_a_new_service_ip_replaces_the_old_one() -> None:
    moved = add_stub_zone(add_stub_zone(K3S, ZONE, ["10.43.0.53"]), ZONE, ["10.43.9.9"])
    assert "10.43.0.53" not in moved and moved.count("clusterset.local:53") == 1
    assert remove_stub_zone(moved, ZONE) == K3S


def test_a_block_someone_else_wrote_is_never_touched() -> None:
    theirs = K3S + "clusterset.local:53 {\n    forward . 1.2.3.4\n}\n"
    with pytest.raises(CorefileError, match=r"already has a server block for clusterset\.local"):
        add_stub_zone(theirs, ZONE, ["10.43.0.53"])
    assert remove_stub_zone(theirs, ZONE) == theirs


def test_blocks_of_other_zones_and_a_missing_final_newline() -> None:
    other = K3S + "example.org:53 {\n    forward . 8.8.8.8\n}"
    added = add_stub_zone(other, ZONE, ["10.43.0.53"])
    assert "example.org:53 {\n    forward . 8.8.8.8\n}\n\n# isthmus" in added
    assert remove_stub_zone(added, ZONE) == other + "\n"
    with pytest.raises(CorefileError):
        add_stub_zone(K3S, ZONE, [])
