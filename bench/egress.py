"""Egress benchmark: what a pod of a source service gets through an ExternalService, against going
straight to the outside server, with the same client and the same server in the same run.

    .venv/bin/python bench/egress.py [--seconds 3] [--samples 20] [--no-kernel]

1. `isthmus up --clusters 1` (a temporary state dir): the egress operator and gateway run from
   deploy/member as in production, the forwarder as a pod the operator creates.
2. An outside server (child process) on 127.33.0.9: port 7200 swallows a stream and answers its
   byte count (throughput), port 7201 answers one byte and closes (connections/s).
3. examples/egress/apps.yaml + an ExternalService `bench` (source: checkout with a claim) toward it.
4. The client (child process, one for every measurement) speaks from the checkout pod's address:
   - direct: to 127.33.0.9 itself;
   - userspace: to the forwarder pod (the Service's endpoint; on a real cluster kube-proxy's kernel
     DNAT stands in front of it), which relays to the gateway, which connects from the claimed IP;
   - the same through the forwarder's ClusterIP, i.e. also through the local clusterset's
     userspace stand-in for kube-proxy (for information).
   Reported: MB/s of one bulk stream, sequential connections/s, and ratios to direct
   (target: userspace ≥ 0.3).
5. Kernel mode (bench/egress_kernel.py, needs root): nftables SNAT in network namespaces the bench
   creates, against the same topology without NAT (target ≥ 0.9).
6. claim → Bound → traffic flowing: the ExternalService already names the next claim; the claim is
   created and the client retries until a connection arrives from its address. p50/p99 over
   --samples claims (target p99 ≤ 1 s).

Only processes this script started are stopped, by PID; `isthmus down` runs whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
OUTSIDE = "127.33.0.9"
BULK_PORT, CONN_PORT = 7200, 7201
NS = "default"

SERVER = r"""
import asyncio, sys
host, bulk_port, conn_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def bulk(r, w):
    n = 0
    while data := await r.read(262144):
        n += len(data)
    w.write(f"{n}\n".encode()); await w.drain(); w.close()
async def conn(r, w):
    w.write(b"k"); await w.drain(); w.close()
async def main():
    await asyncio.start_server(bulk, host, bulk_port)
    await asyncio.start_server(conn, host, conn_port, backlog=1024)
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

CLIENT = r"""
import asyncio, json, socket, sys, time
mode, src, ip, port, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
workers = int(sys.argv[6]) if len(sys.argv) > 6 else 1
def sock():  # IP_BIND_ADDRESS_NO_PORT (24): the port is picked at connect, by 4-tuple, as the relays do
    s = socket.socket(); s.setsockopt(socket.IPPROTO_IP, 24, 1); s.bind((src, 0)); return s
if mode == "bulk":
    chunk = b"x" * 262144
    s = sock(); s.settimeout(5); s.connect((ip, port)); t0 = time.perf_counter(); sent = 0
    while time.perf_counter() - t0 < seconds:
        s.sendall(chunk); sent += len(chunk)
    s.shutdown(socket.SHUT_WR); got = int(s.recv(100).strip()); dt = time.perf_counter() - t0
    assert got == sent, (got, sent)
    print(json.dumps({"mbps": sent / dt / 1e6}))
else:
    async def worker(deadline, counts):
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            s = sock(); s.setblocking(False)
            await loop.sock_connect(s, (ip, port))
            assert await loop.sock_recv(s, 1) == b"k"
            s.close(); counts[0] += 1
    async def main():
        counts = [0]; loop = asyncio.get_running_loop(); t0 = loop.time()
        await asyncio.gather(*(worker(t0 + seconds, counts) for _ in range(workers)))
        print(json.dumps({"cps": counts[0] / (loop.time() - t0)}))
    asyncio.run(main())
"""

ES = """
apiVersion: egress.isthmus.io/v1alpha1
kind: ExternalService
metadata: {name: bench, namespace: default}
spec:
  targetIP: %s
  sources:
  - service: {name: checkout}
    sourceIPClaimName: %s
  ports:
  - {name: bulk, port: %d}
  - {name: conn, port: %d}
"""


class Env:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.env = {**os.environ, "KUBECONFIG": str(state / "kubeconfig")}

    def isthmus(self, *args: str, timeout: float = 300) -> str:
        p = subprocess.run([PY, "-m", "isthmus", *args], capture_output=True, text=True, timeout=timeout, env=self.env)
        if p.returncode != 0:
            raise SystemExit(f"isthmus {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        p = subprocess.run(["kubectl", "--context", "c1", *args], input=stdin, capture_output=True, text=True,
                           timeout=60, env=self.env)
        if p.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)} failed: {p.stderr}")
        return p.stdout

    def get(self, *args: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", *args, "-o", "json")))


def client(mode: str, src: str, ip: str, port: int, seconds: float, workers: int = 1) -> float:
    p = subprocess.run([PY, "-c", CLIENT, mode, src, ip, str(port), str(seconds), str(workers)], capture_output=True,
                       text=True, timeout=seconds + 60)
    if p.returncode != 0:
        raise SystemExit(f"client {mode} to {ip}:{port} failed: {p.stderr.strip()[-400:]}")
    out = json.loads(p.stdout)
    return float(out.get("mbps") or out.get("cps"))


def through(src: str, ip: str, port: int) -> bool:
    try:
        with socket.socket() as s:
            s.settimeout(1.0)
            s.bind((src, 0))
            s.connect((ip, port))
            return s.recv(1) == b"k"
    except OSError:
        return False


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q + 0.999) - 1)]


def wait(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput / connection-rate measurement")
    ap.add_argument("--samples", type=int, default=20, help="claims for the claim → traffic latency")
    ap.add_argument("--concurrency", type=int, default=8, help="clients at once for the second conn/s figure")
    ap.add_argument("--no-kernel", action="store_true", help="skip the kernel-mode measurement")
    ap.add_argument("--quick", action="store_true", help="1 s per measurement, 5 claims, no kernel mode")
    a = ap.parse_args()
    if a.quick:
        a.seconds, a.samples, a.no_kernel = min(a.seconds, 1.0), min(a.samples, 5), True
    print(f"egress benchmark on {os.cpu_count()} CPUs, {a.seconds:.0f}s per measurement")
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-egress-") as tmp:
        env = Env(Path(tmp) / "state")
        server = subprocess.Popen([PY, "-c", SERVER, OUTSIDE, str(BULK_PORT), str(CONN_PORT)], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            t0 = time.monotonic()
            env.isthmus("up", "--clusters", "1", "--detach", "--state-dir", str(env.state))
            print(f"isthmus up --clusters 1: {time.monotonic() - t0:.1f}s")
            run(env, a)
        finally:
            subprocess.run([PY, "-m", "isthmus", "down", "--state-dir", str(env.state)], capture_output=True,
                           timeout=120, env=env.env)
            server.terminate()
            server.wait(10)
    if not a.no_kernel:
        kernel()


def run(env: Env, a: Any) -> None:
    env.kubectl("apply", "-n", NS, "-f", str(ROOT / "examples/egress/apps.yaml"))
    env.kubectl("-n", NS, "rollout", "status", "deployment/checkout", "--timeout=60s")
    env.kubectl("apply", "-f", "-", stdin="apiVersion: egress.isthmus.io/v1alpha1\nkind: SourceIPClaim\n"
                "metadata: {name: bench-0, namespace: default}\nspec: {sourceIPClassName: isthmus-local}\n")
    env.kubectl("apply", "-f", "-", stdin=ES % (OUTSIDE, "bench-0", BULK_PORT, CONN_PORT))
    env.kubectl("-n", NS, "wait", "--for=condition=Ready", "externalservice/bench", "--timeout=90s")
    src = env.get("pods", "-n", NS, "-l", "app=checkout")["items"][0]["status"]["podIP"]
    workload = env.get("externalservice", "bench", "-n", NS)["status"]["forwarder"].split("/")
    fwd_pod = env.get("pods", "-n", workload[0], "-l", f"egress.isthmus.io/forwarder={workload[1]}")["items"][0][
        "status"]["podIP"]
    fwd_svc = env.get("service", "bench", "-n", "external-services")["spec"]["clusterIP"]
    wait("traffic through the forwarder", lambda: through(src, fwd_pod, CONN_PORT))
    paths = [("direct", OUTSIDE), ("userspace (forwarder pod)", fwd_pod),
             ("userspace via ClusterIP (+ local proxy)", fwd_svc)]
    rows = []
    for name, ip in paths:
        mbps = client("bulk", src, ip, BULK_PORT, a.seconds)
        seq = client("conn", src, ip, CONN_PORT, a.seconds)
        par = client("conn", src, ip, CONN_PORT, a.seconds, a.concurrency)
        rows.append((name, mbps, seq, par))
    d = rows[0]
    print(f"\n{'path':42} {'MB/s':>8} {'ratio':>6} {'conn/s 1':>9} {'ratio':>6} "
          f"{f'conn/s {a.concurrency}':>10} {'ratio':>6}")
    for name, mbps, seq, par in rows:
        print(f"{name:42} {mbps:8.1f} {mbps / d[1]:6.2f} {seq:9.0f} {seq / d[2]:6.2f} {par:10.0f} {par / d[3]:6.2f}")
    print(f"target: userspace (forwarder pod) >= 0.30 of direct. 'conn/s 1': one client connecting in a loop "
          f"(latency-bound: two relay hops on {os.cpu_count()} CPUs); 'conn/s {a.concurrency}': "
          f"{a.concurrency} at once")

    # claim → Bound → traffic flowing
    latencies = []
    for i in range(1, a.samples + 1):
        name = f"bench-{i}"
        env.kubectl("apply", "-f", "-", stdin=ES % (OUTSIDE, name, BULK_PORT, CONN_PORT))
        env.kubectl("delete", "sourceipclaim", f"bench-{i - 1}", "-n", NS, "--wait=false")
        # The forwarder drops the old source first: what follows is the new claim's doing.
        wait("the old claim's rules to go", lambda: not through(src, fwd_pod, CONN_PORT), timeout=30)
        t0 = time.monotonic()
        env.kubectl("apply", "-f", "-", stdin="apiVersion: egress.isthmus.io/v1alpha1\nkind: SourceIPClaim\n"
                    f"metadata: {{name: {name}, namespace: default}}\nspec: {{sourceIPClassName: isthmus-local}}\n")
        wait(f"traffic with claim {name}", lambda: through(src, fwd_pod, CONN_PORT), timeout=30)
        latencies.append(time.monotonic() - t0)
    print(f"\nclaim created → Bound → first connection through: p50 {statistics.median(latencies) * 1000:.0f} ms, "
          f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms over {len(latencies)} claims (target p99 <= 1000 ms; "
          "includes one kubectl apply)")


def kernel() -> None:
    if os.geteuid() != 0:
        print("\nkernel mode: skipped (needs root for network namespaces)")
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from egress_kernel import report
    from egress_kernel import run as run_kernel

    print("\nkernel mode (nftables SNAT in network namespaces this bench creates):")
    report(run_kernel())


if __name__ == "__main__":
    main()
