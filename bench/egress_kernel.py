"""Egress gateway kernel mode benchmark: TCP through the nftables SNAT path vs routed without NAT.

    .venv/bin/python bench/egress_kernel.py [--seconds 3]        (root: creates network namespaces)

1. Three network namespaces made here (`pod`, `gw`, `out`, unique names) joined by veth pairs:
   pod 10.231.1.2 ── 10.231.1.1 gw 10.231.2.1 ── out 10.231.2.2 (NAT target), 10.231.2.3 (direct target).
   gw forwards; pod routes 10.231.2.0/24 via gw.
2. A server (child in `out`) serves a sink (reads to EOF, answers the byte count and the peer it
   saw) and an accept-and-close port on both out addresses.
3. The same client code (child in `pod`) measures, for `seconds` each:
   - throughput: one bulk TCP stream (MB/s, bytes the server counted / time to its answer);
   - connections/s: sequential connect + close.
   (a) direct: to 10.231.2.3, no Isthmus table in gw (only a baseline one tracking connections, as
       every Kubernetes node does); out gets a route back to the pod network for this run only.
   (b) kernel: to 10.231.2.2 through `KernelGateway` (SNAT to 10.231.2.100; the route back is gone,
       so only SNAT'd traffic can be answered; the server must see 10.231.2.100).
Figures and the kernel/direct ratios (target ≥ 0.9) are printed and returned; nothing is asserted.
Only processes this script started are stopped, by PID; the namespaces are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from isthmus.egress.kernel import EgressFlow, KernelGateway  # noqa: E402

POD, GW_POD, GW_OUT = "10.231.1.2", "10.231.1.1", "10.231.2.1"
TARGET, DIRECT, SOURCE = "10.231.2.2", "10.231.2.3", "10.231.2.100"
SINK, CONNECT = 5001, 5002
TIMEOUT = 30.0

SERVER = r"""
import socket, sys, threading, time
addrs, lifetime = sys.argv[1].split(","), float(sys.argv[2])

def sink(conn, peer):
    buf, total = bytearray(1 << 20), 0
    with conn:
        while n := conn.recv_into(buf):
            total += n
        conn.sendall(f"{total} {peer[0]}".encode())

def serve(sock, handler):
    while True:
        conn, peer = sock.accept()
        if handler is None:
            conn.close()
        else:
            threading.Thread(target=handler, args=(conn, peer), daemon=True).start()

for addr in addrs:
    for port, handler in ((5001, sink), (5002, None)):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(1024)
        threading.Thread(target=serve, args=(s, handler), daemon=True).start()
print("ready", flush=True)
time.sleep(lifetime)
"""

CLIENT = r"""
import json, socket, struct, sys, time
mode, src, host, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
if mode == "bulk":
    chunk = b"x" * (256 << 10)
    s = socket.create_connection((host, 5001), timeout=10, source_address=(src, 0))
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        s.sendall(chunk)
    s.shutdown(socket.SHUT_WR)
    total, peer = s.recv(100).decode().split()
    elapsed = time.perf_counter() - start
    print(json.dumps({"mb_s": int(total) / elapsed / 1e6, "peer": peer}))
else:
    linger = struct.pack("ii", 1, 0)  # RST on close: no TIME_WAIT piling up on the client's ports
    n, start = 0, time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        s = socket.socket()
        s.settimeout(5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        s.bind((src, 0))
        s.connect((host, 5002))
        s.close()
        n += 1
    print(json.dumps({"conn_s": n / (time.perf_counter() - start)}))
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done


class Topology:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.pod, self.gw, self.out = f"ib-{tag}-pod", f"ib-{tag}-gw", f"ib-{tag}-out"
        self.procs: list[subprocess.Popen[str]] = []

    def ns(self, ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", ns, *argv)

    def up(self) -> None:
        for ns in (self.pod, self.gw, self.out):
            sh("ip", "netns", "add", ns)
            self.ns(ns, "ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "p0", "netns", self.pod, "type", "veth", "peer", "name", "g0", "netns", self.gw)
        sh("ip", "link", "add", "g1", "netns", self.gw, "type", "veth", "peer", "name", "o0", "netns", self.out)
        for ns, dev, addrs in ((self.pod, "p0", (f"{POD}/24",)), (self.gw, "g0", (f"{GW_POD}/24",)),
                               (self.gw, "g1", (f"{GW_OUT}/24",)), (self.out, "o0", (f"{TARGET}/24", f"{DIRECT}/32"))):
            for a in addrs:
                self.ns(ns, "ip", "addr", "add", a, "dev", dev)
            self.ns(ns, "ip", "link", "set", dev, "up")
        self.ns(self.pod, "ip", "route", "add", "10.231.2.0/24", "via", GW_POD)
        self.ns(self.gw, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        # Both paths cross a router that tracks connections, as every Kubernetes node does (kube-proxy
        # and CNIs use conntrack): the ratio is then the cost of Isthmus's rules, not of conntrack.
        subprocess.run(["ip", "netns", "exec", self.gw, "nft", "-f", "-"], check=True, text=True, timeout=TIMEOUT,
                       input="table inet baseline {\n chain forward {\n  type filter hook forward priority 10; "
                             "policy accept;\n  ct state established,related accept\n }\n}\n")
        proc = subprocess.Popen(["ip", "netns", "exec", self.out, sys.executable, "-c", SERVER,
                                 f"{TARGET},{DIRECT}", "600"], stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the bench server did not start")

    def down(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # by PID: `ip netns exec` execs python in place
            proc.wait(timeout=TIMEOUT)
        for ns in (self.pod, self.gw, self.out):
            sh("ip", "netns", "del", ns, check=False)

    def client(self, mode: str, host: str, seconds: float) -> dict[str, float | str]:
        done = subprocess.run(["ip", "netns", "exec", self.pod, sys.executable, "-c", CLIENT, mode, POD, host,
                               str(seconds)], capture_output=True, text=True, timeout=seconds + TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"client {mode} {host}: {done.stderr.strip()}")
        result: dict[str, float | str] = json.loads(done.stdout)
        return result


async def _measure(seconds: float, rounds: int) -> dict[str, float]:
    topo = Topology()
    samples: dict[str, list[float]] = {"direct_mb_s": [], "kernel_mb_s": [], "direct_conn_s": [], "kernel_conn_s": []}
    gw = KernelGateway(interface="g1", netns=topo.gw)
    flows = [EgressFlow("TCP", SOURCE, TARGET, port, (POD,)) for port in (SINK, CONNECT)]

    async def direct() -> None:
        # routed, no nftables table at all; out may answer the pod network for this run only
        await gw.release()
        topo.ns(topo.out, "ip", "route", "replace", "10.231.1.0/24", "via", GW_OUT)
        bulk = topo.client("bulk", DIRECT, seconds)
        if bulk["peer"] != POD:
            raise RuntimeError(f"direct run arrived from {bulk['peer']}, not {POD}")
        samples["direct_mb_s"].append(float(bulk["mb_s"]))
        samples["direct_conn_s"].append(float(topo.client("conns", DIRECT, seconds)["conn_s"]))
        topo.ns(topo.out, "ip", "route", "del", "10.231.1.0/24")

    async def kernel() -> None:
        # SNAT to the claimed source; no route back, so only SNAT'd traffic can be answered
        await gw.apply(flows, [])
        bulk = topo.client("bulk", TARGET, seconds)
        if bulk["peer"] != SOURCE:
            raise RuntimeError(f"kernel run arrived from {bulk['peer']}, not {SOURCE}")
        samples["kernel_mb_s"].append(float(bulk["mb_s"]))
        samples["kernel_conn_s"].append(float(topo.client("conns", TARGET, seconds)["conn_s"]))
        await gw.release()

    try:
        topo.up()
        for n in range(rounds):  # alternate the order: drift on a busy machine hits both paths alike
            for step in ((direct, kernel) if n % 2 == 0 else (kernel, direct)):
                await step()
    finally:
        try:
            await gw.release()
        finally:
            topo.down()
    figures = {name: statistics.median(values) for name, values in samples.items()}
    figures["throughput_ratio"] = figures["kernel_mb_s"] / figures["direct_mb_s"]
    figures["conn_ratio"] = figures["kernel_conn_s"] / figures["direct_conn_s"]
    return figures


def run(seconds: float = 3.0, rounds: int = 3) -> dict[str, float]:
    """Measure both paths, `seconds` per measurement, `rounds` times alternating; returns the medians
    (MB/s, connections/s) and the kernel/direct ratios."""
    if os.geteuid() != 0:
        raise PermissionError("the kernel gateway bench needs root (network namespaces, nftables)")
    return asyncio.run(_measure(seconds, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="direct/kernel pairs, alternating order")
    args = parser.parse_args()
    report(run(args.seconds, args.rounds))


def report(figures: dict[str, float]) -> None:
    print(f"{'median':12} {'direct':>12} {'kernel SNAT':>12} {'ratio':>8}")
    print(f"{'TCP MB/s':12} {figures['direct_mb_s']:12.1f} {figures['kernel_mb_s']:12.1f} "
          f"{figures['throughput_ratio']:8.3f}")
    print(f"{'TCP conn/s':12} {figures['direct_conn_s']:12.0f} {figures['kernel_conn_s']:12.0f} "
          f"{figures['conn_ratio']:8.3f}")
    print("target: kernel/direct >= 0.9")


if __name__ == "__main__":
    main()
