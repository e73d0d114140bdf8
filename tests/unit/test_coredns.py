"""The CoreDNS stub-zone edit: idempotent, reversible to the byte, and never a corrupted Corefile."""

from __future__ import annotations

import pytest

from isthmus.kube.coredns import CorefileError, add_stub_zone, remove_stub_zone, stub_zone_servers
from tests.harness.samples import KUBEADM

ZONE = "clusterset.local"


# k3s's (manifests/coredns.yaml): NodeHosts, and an import of custom server blocks at the end.
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

# Hand-edited: comments, tabs, a stub zone of someone else's, no final newline.
EDITED = """# company DNS
corp.example:53 {\t# on-prem
\tforward . 10.0.0.2   # dc1
}

.:53 {
  errors
  forward . /etc/resolv.conf
  reload
}"""


@pytest.mark.parametrize("corefile", [KUBEADM, K3S, EDITED, EDITED.replace("\n", "\r\n"), ""],
                         ids=["kubeadm", "k3s", "edited", "crlf", "empty"])
def test_add_is_idempotent_and_remove_restores_the_bytes(corefile: str) -> None:
    added = add_stub_zone(corefile, ZONE, ["10.96.0.53"])
    assert added.endswith(corefile)  # the user's text is untouched, ours comes first
    assert "clusterset.local:53 {" in added and "forward . 10.96.0.53:53" in added
    assert add_stub_zone(added, ZONE, ["10.96.0.53"]) == added
    assert add_stub_zone(added, ZONE, ["10.96.0.53:53"]) == added
    assert remove_stub_zone(added, ZONE) == corefile
    assert remove_stub_zone(corefile, ZONE) == corefile
    assert stub_zone_servers(added, ZONE) == ["10.96.0.53:53"]
    assert stub_zone_servers(corefile, ZONE) is None


def test_the_block_is_lighthouse_shaped() -> None:
    added = add_stub_zone(KUBEADM, ZONE, ["10.96.0.53"])
    block = added[: len(added) - len(KUBEADM)]
    lines = block.splitlines()
    assert lines[0].startswith("# isthmus-begin clusterset.local:")
    assert lines[1:4] == ["clusterset.local:53 {", "    forward . 10.96.0.53:53", "}"]
    assert lines[4] == "# isthmus-end clusterset.local"


def test_new_servers_replace_ours_in_place_and_leave_the_rest() -> None:
    # Our block moved by a human below the main one, then the DNS Service got a new IP.
    added = add_stub_zone(KUBEADM, ZONE, ["10.96.0.53"])
    block = added[: len(added) - len(KUBEADM)]
    moved = KUBEADM + "\n" + block
    updated = add_stub_zone(moved, ZONE, ["10.96.7.7", "fd00::53", "[fd00::54]:5353"])
    assert updated.startswith(KUBEADM + "\n")
    assert "forward . 10.96.7.7:53 [fd00::53]:53 [fd00::54]:5353" in updated
    assert "10.96.0.53" not in updated
    assert remove_stub_zone(updated, ZONE) == KUBEADM + "\n"


def test_zones_are_independent() -> None:
    both = add_stub_zone(add_stub_zone(KUBEADM, ZONE, ["10.96.0.53"]), "other.zone", ["10.96.0.54"])
    assert stub_zone_servers(both, ZONE) == ["10.96.0.53:53"]
    assert stub_zone_servers(both, "other.zone") == ["10.96.0.54:53"]
    assert remove_stub_zone(remove_stub_zone(both, ZONE), "other.zone") == KUBEADM


@pytest.mark.parametrize("key", ["clusterset.local:53", "clusterset.local", "dns://clusterset.local.:53",
                                 "example.org, clusterset.local"])
def test_a_block_for_the_zone_that_is_not_ours_is_refused(key: str) -> None:
    corefile = KUBEADM + key + " {\n    forward . 10.1.1.1\n}\n"
    with pytest.raises(CorefileError, match="did not add"):
        add_stub_zone(corefile, ZONE, ["10.96.0.53"])
    # Another port of the same name is another server: allowed.
    assert add_stub_zone(KUBEADM + "clusterset.local:5300 {\n}\n", ZONE, ["10.96.0.53"])


@pytest.mark.parametrize("corefile", [KUBEADM + "}\n", KUBEADM[:-2], ".:53 {\n  hosts \"unterminated {\n}\n"],
                         ids=["extra-close", "missing-close", "quote"])
def test_malformed_corefiles_are_refused(corefile: str) -> None:
    with pytest.raises(CorefileError):
        add_stub_zone(corefile, ZONE, ["10.96.0.53"])


def test_damaged_markers_are_refused_not_guessed() -> None:
    added = add_stub_zone(KUBEADM, ZONE, ["10.96.0.53"])
    no_end = added.replace("# isthmus-end clusterset.local\n", "")
    for damaged in (no_end, added + added[: len(added) - len(KUBEADM)]):
        with pytest.raises(CorefileError, match="markers"):
            add_stub_zone(damaged, ZONE, ["10.96.0.53"])
        with pytest.raises(CorefileError, match="markers"):
            remove_stub_zone(damaged, ZONE)


@pytest.mark.parametrize("zone", ["", "bad zone", "-x.local", "a..b"])
def test_bad_zone_names(zone: str) -> None:
    with pytest.raises(CorefileError, match="not a DNS zone"):
        add_stub_zone(KUBEADM, zone, ["10.96.0.53"])


@pytest.mark.parametrize("servers", [[], ["dns.example"], ["10.0.0.1:0"], ["10.0.0.1:x"], ["[fd00::1]x"]])
def test_bad_servers(servers: list[str]) -> None:
    with pytest.raises(CorefileError):
        add_stub_zone(KUBEADM, ZONE, servers)


def test_zone_is_normalised() -> None:
    assert add_stub_zone(KUBEADM, "ClusterSet.Local.", ["10.96.0.53"]) == add_stub_zone(KUBEADM, ZONE, ["10.96.0.53"])
