"""The kernel gateway with real packets: three network namespaces made here (`pod`, `gw`, `out`),
KernelGateway programming nftables and addresses inside `gw`, tiny Python servers and clients in
`pod` and `out` reporting the peer address they see.

    pod 10.231.1.2-4 ── veth ── 10.231.1.1 gw 10.231.2.1 ── veth ── 10.231.2.2 (target), .3 out

`pod` routes 10.231.2.0/24 via gw; `out` has no route back to the pod network, so only SNAT'd
traffic can be answered. Every name is unique per test, every subprocess has a timeout, and the
namespaces (with their veths) are deleted in teardown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from isthmus.egress.kernel import EgressFlow, IngressFlow, KernelError, KernelGateway

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None,
                                reason="needs root (network namespaces) and nft/ip installed")

POD_A, POD_B, POD_X = "10.231.1.2", "10.231.1.3", "10.231.1.4"
TARGET, OTHER = "10.231.2.2", "10.231.2.3"
SRC_A, SRC_B, SRC_PRE = "10.231.2.100", "10.231.2.101", "10.231.2.102"
TIMEOUT = 20

SERVER = r"""
import socket, sys, time
proto, addr, port, log, lifetime = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
tcp = proto == "TCP"
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
if tcp:
    s.listen(64)
s.settimeout(0.2)
print("ready", flush=True)
deadline = time.monotonic() + lifetime
with open(log, "a") as out:
    while time.monotonic() < deadline:
        try:
            if tcp:
                conn, peer = s.accept()
                conn.settimeout(2)
                try:
                    conn.recv(100)
                    conn.sendall(peer[0].encode())
                except OSError:
                    pass
                conn.close()
            else:
                _, peer = s.recvfrom(100)
                s.sendto(peer[0].encode(), peer)
        except TimeoutError:
            continue
        out.write(peer[0] + "\n")
        out.flush()
"""

CLIENT = r"""
import socket, sys
proto, src, host, port, timeout = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if proto == "TCP" else socket.SOCK_DGRAM)
s.settimeout(timeout)
s.bind((src, 0))
try:
    if proto == "TCP":
        s.connect((host, port))
        s.sendall(b"hi")
    else:
        s.sendto(b"hi", (host, port))
    print(s.recv(100).decode())
except OSError as err:
    print("ERR", type(err).__name__)
"""


def sh(*argv: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, input=stdin)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {done.stderr}")
    return done


class Topology:
    """pod/gw/out namespaces, servers started in them, and their cleanup."""

    def __init__(self, tmp: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.pod, self.gw, self.out = f"ie-{tag}-pod", f"ie-{tag}-gw", f"ie-{tag}-out"
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []

    def up(self) -> None:
        for ns in (self.pod, self.gw, self.out):
            sh("ip", "netns", "add", ns)
            self.ns(ns, "ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "p0", "netns", self.pod, "type", "veth", "peer", "name", "g0", "netns", self.gw)
        sh("ip", "link", "add", "g1", "netns", self.gw, "type", "veth", "peer", "name", "o0", "netns", self.out)
        for ns, dev, addrs in ((self.pod, "p0", (f"{POD_A}/24", f"{POD_B}/32", f"{POD_X}/32")),
                               (self.gw, "g0", ("10.231.1.1/24",)), (self.gw, "g1", ("10.231.2.1/24",)),
                               (self.out, "o0", (f"{TARGET}/24", f"{OTHER}/32"))):
            for a in addrs:
                self.ns(ns, "ip", "addr", "add", a, "dev", dev)
            self.ns(ns, "ip", "link", "set", dev, "up")
        self.ns(self.pod, "ip", "route", "add", "10.231.2.0/24", "via", "10.231.1.1")
        self.ns(self.gw, "sysctl", "-qw", "net.ipv4.ip_forward=1")

    def down(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # by PID: `ip netns exec` execs python in place
            proc.wait(timeout=TIMEOUT)
        for ns in (self.pod, self.gw, self.out):
            sh("ip", "netns", "del", ns, check=False)

    def ns(self, ns: str, *argv: str, check: bool = True, stdin: str | None = None
           ) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", ns, *argv, check=check, stdin=stdin)

    def server(self, ns: str, proto: str, addr: str, port: int) -> Path:
        """Start an echo server answering with the peer address; returns its log of peers."""
        log = self.tmp / f"{ns}-{proto}-{addr}-{port}.log"
        log.touch()
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SERVER, proto, addr, str(port),
                                 str(log), "90"], stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return log

    def client(self, ns: str, proto: str, src: str, host: str, port: int, timeout: float = 2.0) -> str:
        """What the server answered (the peer address it saw), or `ERR <exception>`."""
        return self.ns(ns, sys.executable, "-c", CLIENT, proto, src, host, str(port), str(timeout)).stdout.strip()

    def addresses(self, dev: str = "g1") -> set[str]:
        out = self.ns(self.gw, "ip", "-o", "-4", "addr", "show", "dev", dev).stdout
        return {line.split()[3].split("/")[0] for line in out.splitlines()}

    def tables(self) -> str:
        return self.ns(self.gw, "nft", "list", "tables").stdout


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    t = Topology(tmp_path)
    try:
        t.up()
        yield t
    finally:
        t.down()


def peers(log: Path) -> list[str]:
    return log.read_text().split()


async def test_egress_snat_to_the_claimed_source(topo: Topology) -> None:
    tcp = topo.server(topo.out, "TCP", TARGET, 8080)
    udp = topo.server(topo.out, "UDP", TARGET, 5353)
    # Before anything is programmed the out side cannot answer the pod network (no route back).
    assert topo.client(topo.pod, "TCP", POD_A, TARGET, 8080, timeout=1).startswith("ERR")
    gw = KernelGateway(interface="g1", netns=topo.gw)
    flows = [EgressFlow("TCP", SRC_A, TARGET, 8080, (POD_A,)), EgressFlow("UDP", SRC_A, TARGET, 5353, (POD_A,)),
             EgressFlow("TCP", SRC_B, TARGET, 8080, (POD_B,))]
    await gw.apply(flows, [])
    assert gw.owned == {SRC_A, SRC_B} and {SRC_A, SRC_B} <= topo.addresses()
    await gw.apply(flows, [])  # idempotent
    assert gw.owned == {SRC_A, SRC_B}

    # 1. a client in `clients` arrives from the flow's source IP, TCP and UDP
    assert topo.client(topo.pod, "TCP", POD_A, TARGET, 8080) == SRC_A
    assert topo.client(topo.pod, "UDP", POD_A, TARGET, 5353) == SRC_A
    # 2. another client/source pair arrives with its own source IP
    assert topo.client(topo.pod, "TCP", POD_B, TARGET, 8080) == SRC_B
    # POD_B is not a client of the UDP flow
    assert topo.client(topo.pod, "UDP", POD_B, TARGET, 5353, timeout=1).startswith("ERR")

    # 3. a pod address in no flow's clients is refused and counted; the server saw nothing from it
    before = (await gw.refused())["refused"]
    assert topo.client(topo.pod, "TCP", POD_X, TARGET, 8080, timeout=1).startswith("ERR")
    assert (await gw.refused())["refused"] > before
    assert sorted(set(peers(tcp))) == [SRC_A, SRC_B] and set(peers(udp)) == {SRC_A}
    assert POD_X not in peers(tcp) and POD_A not in peers(tcp)

    # re-applying keeps the count (the table is replaced, the counter carried over)
    refused = await gw.refused()
    await gw.apply(flows, [])
    assert (await gw.refused())["refused"] >= refused["refused"] > 0
    await gw.release()


async def test_ingress_dnat_only_from_the_peer(topo: Topology) -> None:
    inside = topo.server(topo.pod, "TCP", POD_A, 9001)
    inside_udp = topo.server(topo.pod, "UDP", POD_A, 9053)
    gw = KernelGateway(interface="g1", netns=topo.gw)
    await gw.apply([], [IngressFlow("TCP", SRC_A, 9000, TARGET, POD_A, 9001),
                        IngressFlow("UDP", SRC_A, 53, TARGET, POD_A, 9053)])
    assert gw.owned == {SRC_A}

    # 4. the peer (the ExternalService's targetIP) reaches the service, which sees it as the peer
    assert topo.client(topo.out, "TCP", TARGET, SRC_A, 9000) == TARGET
    assert topo.client(topo.out, "UDP", TARGET, SRC_A, 53) == TARGET
    assert peers(inside) == [TARGET] and peers(inside_udp) == [TARGET]
    # ... any other outside address is refused and counted, on the flow's port and any other
    before = (await gw.refused())["refused_ingress"]
    assert topo.client(topo.out, "TCP", OTHER, SRC_A, 9000, timeout=1).startswith("ERR")
    assert topo.client(topo.out, "UDP", OTHER, SRC_A, 53, timeout=1).startswith("ERR")
    assert topo.client(topo.out, "TCP", TARGET, SRC_A, 22, timeout=1).startswith("ERR")
    assert (await gw.refused())["refused_ingress"] >= before + 3
    assert peers(inside) == [TARGET] and peers(inside_udp) == [TARGET]

    # A DNAT somebody else wrote to the flow's destination does not let another peer in (forward check).
    rogue = ("table ip rogue {\n chain pre {\n type nat hook prerouting priority dstnat;\n"
             f" ip daddr 10.231.2.1 tcp dport 9999 dnat to {POD_A}:9001\n }}\n}}\n")
    topo.ns(topo.gw, "nft", "-f", "-", stdin=rogue)
    assert topo.client(topo.out, "TCP", OTHER, "10.231.2.1", 9999, timeout=1).startswith("ERR")
    assert topo.client(topo.out, "TCP", TARGET, "10.231.2.1", 9999) == TARGET  # the peer still may
    assert peers(inside) == [TARGET, TARGET]
    await gw.release()


async def test_removal_release_and_foreign_addresses(topo: Topology) -> None:
    log = topo.server(topo.out, "TCP", TARGET, 8080)
    topo.server(topo.out, "TCP", TARGET, 8081)
    # An address somebody else configured: used as a source, never removed.
    topo.ns(topo.gw, "ip", "addr", "add", f"{SRC_PRE}/32", "dev", "g1")
    gw = KernelGateway(interface="g1", netns=topo.gw)
    a = EgressFlow("TCP", SRC_A, TARGET, 8080, (POD_A,))
    pre = EgressFlow("TCP", SRC_PRE, TARGET, 8081, (POD_A,))
    await gw.apply([a, pre], [])
    assert gw.owned == {SRC_A}
    assert topo.client(topo.pod, "TCP", POD_A, TARGET, 8080) == SRC_A
    assert topo.client(topo.pod, "TCP", POD_A, TARGET, 8081) == SRC_PRE

    # 5. the flow removed: its new connections are refused, its address taken away, the other kept
    await gw.apply([pre], [])
    assert gw.owned == frozenset()
    assert SRC_A not in topo.addresses() and SRC_PRE in topo.addresses()
    assert topo.client(topo.pod, "TCP", POD_A, TARGET, 8080, timeout=1).startswith("ERR")
    assert peers(log) == [SRC_A]
    await gw.apply([], [])  # the foreign address is not ours to remove even when no flow wants it
    assert SRC_PRE in topo.addresses()

    await gw.apply([a, EgressFlow("TCP", "2001:db8:2::100", "2001:db8:2::2", 443, ())], [])
    assert "table ip isthmus_egress" in topo.tables() and "table ip6 isthmus_egress" in topo.tables()
    await gw.release()
    assert [t for t in topo.tables().split("\n") if t.endswith(" isthmus_egress")] == []
    # Fail closed after the lease is lost: the destinations it carried stay blocked (unNATed, a pod's
    # packets would leave from the pod's own address), until a leader applies again.
    assert "isthmus_egress_released" in topo.tables()
    assert topo.client(topo.pod, "TCP", POD_A, TARGET, 8080).startswith("ERR")
    assert gw.owned == frozenset()
    assert topo.addresses() == {"10.231.2.1", SRC_PRE}
    await gw.release()  # idempotent


async def test_rejected_script_leaves_nothing_behind(topo: Topology) -> None:
    gw = KernelGateway(interface="g1", netns=topo.gw, nft="false")  # an nft that always fails
    with pytest.raises(KernelError, match="failed"):
        await gw.apply([EgressFlow("TCP", SRC_A, TARGET, 8080, (POD_A,))], [])
    assert gw.owned == frozenset() and SRC_A not in topo.addresses()
    with pytest.raises(ValueError, match="protocol"):
        await gw.apply([EgressFlow("ICMP", SRC_A, TARGET, 8080, (POD_A,))], [])
    assert SRC_A not in topo.addresses()


async def test_the_gateway_in_kernel_mode_programs_its_gateway_objects(topo: Topology, tmp_path: Path) -> None:
    """`isthmus egress-gateway --mode kernel` end to end: Gateway objects and bindings in a real
    embedded apiserver → nftables in the gateway namespace; a rule whose address nobody claimed is
    never programmed; losing the lease leaves the destinations blocked."""
    import asyncio
    import contextlib

    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    from isthmus.api.egress import Gateway, SourceIPClaim, SourceIPClass
    from isthmus.cli import admission_plugins
    from isthmus.egress.gateway import GatewayRuntime
    from isthmus.egress.operator import EgressOperator
    from isthmus.kube import helpers
    from isthmus.kube.resources import resource_for
    from tests.harness.apiserver import RunningApiServer
    from tests.harness.polling import eventually

    tcp = topo.server(topo.out, "TCP", TARGET, 8080)
    srv = RunningApiServer(tmp_path / "apiserver", admission=admission_plugins.build([]))
    await srv.start()
    client = srv.client()
    tasks: list[asyncio.Task[None]] = []
    kernel = KernelGateway(interface="g1", netns=topo.gw)
    try:
        await helpers.install_crds(client)
        await client.create(Namespace(metadata=ObjectMeta(name="isthmus-system")))
        tasks.append(asyncio.create_task(EgressOperator(client, identity="op", lease_duration=3.0, renew_deadline=2.0,
                                                        retry_period=0.5).run()))
        await client.create(resource_for(SourceIPClass).from_dict({"metadata": {"name": "k"}, "spec": {
            "ranges": [{"start": SRC_A, "end": SRC_A}], "allowedNamespaces": ["default"]}}))
        await client.create(resource_for(SourceIPClaim).from_dict({
            "metadata": {"name": "a", "namespace": "default"}, "spec": {"sourceIPClassName": "k"}}))

        async def bound() -> bool:
            st = (await client.get(resource_for(SourceIPClaim), "a", namespace="default")).to_dict().get("status")
            return bool(st and st.get("phase") == "Bound")

        await eventually(bound, 15, "claim bound")
        rules = [{"protocol": "TCP", "sourceIP": SRC_A, "destinationIP": TARGET, "destinationPort": 8080,
                  "clientIPs": [POD_A]},
                 {"protocol": "TCP", "sourceIP": SRC_B, "destinationIP": TARGET, "destinationPort": 8080,
                  "clientIPs": [POD_B]}]  # SRC_B is claimed by nobody
        await client.apply(resource_for(Gateway).from_dict({
            "apiVersion": "egress.isthmus.io/v1alpha1", "kind": "Gateway",
            "metadata": {"name": "default.k", "namespace": "isthmus-system"},
            "spec": {"externalService": {"namespace": "default", "name": "k"}, "egressRules": rules}}),
            field_manager="test", force=True)
        gw = GatewayRuntime(client, namespace="isthmus-system", identity="gw", relay_ip="127.0.0.1", mode="kernel",
                            kernel=kernel, lease_duration=1.5, renew_deadline=1.0, retry_period=0.25)
        tasks.append(asyncio.create_task(gw.run()))

        async def programmed() -> str | None:
            st = (await client.get(resource_for(Gateway), "default.k", namespace="isthmus-system")).to_dict()
            conds = {c["type"]: c for c in (st.get("status") or {}).get("conditions") or []}
            return conds.get("Ready", {}).get("reason")

        assert await eventually(programmed, 15, "Gateway status") == "SourceNotClaimed"
        assert await asyncio.to_thread(topo.client, topo.pod, "TCP", POD_A, TARGET, 8080) == SRC_A
        assert (await asyncio.to_thread(topo.client, topo.pod, "TCP", POD_B, TARGET, 8080, 1.0)).startswith("ERR")
        assert kernel.owned == {SRC_A}
        assert set(peers(tcp)) == {SRC_A}
        # The gateway stops (its lease released): nothing leaves for the target any more.
        tasks[-1].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[-1]
        assert kernel.owned == frozenset()
        assert (await asyncio.to_thread(topo.client, topo.pod, "TCP", POD_A, TARGET, 8080, 1.0)).startswith("ERR")
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(Exception):
            await kernel.release()
        await srv.close()
