"""Kernel splice benchmark: one connection's round trips direct, relayed by the proxy, and spliced.

    .venv/bin/python bench/proxy_splice.py [--round-trips 20000] [--rounds 3] [--stream-mib 256]

A blocking Python echo backend (a process per connection) on 127.203.9.1:18080, and two TCP
listeners of the proxy (`isthmus.proxy.tcp.TcpListener` on uvloop, each in a process of its own):
127.204.9.10:8001 relays every byte, 127.204.9.10:8002 hands the connection to the kernel splice
(`isthmus.proxy.splice`) at its second client read. The client (this process) sends a 64-byte
message and waits for its echo, `--round-trips` times per target and round, targets alternating;
then asks the backend to stream `--stream-mib` MiB back on the same connection. Reported: µs per
round trip, CPU of the whole machine per round trip from /proc/stat (kworkers and softirqs
included, which per-process CPU misses), and the stream's MiB/s and CPU per MiB. Needs root for
the splice (else that target relays too, and says so). Only processes this script started are
stopped. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import time

BACKEND = ("127.203.9.1", 18080)
LISTEN = "127.204.9.10"
TARGETS = {"direct": BACKEND, "relayed": (LISTEN, 8001), "spliced": (LISTEN, 8002)}
MESSAGE = b"x" * 64


def backend(stream_mib: int) -> None:
    lis = socket.socket()
    lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lis.bind(BACKEND)
    lis.listen(64)
    while True:
        conn, _ = lis.accept()
        if os.fork() == 0:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(65536):
                if data == b"STREAM":
                    blob = b"y" * (1 << 20)
                    for _ in range(stream_mib):
                        conn.sendall(blob)
                    conn.shutdown(socket.SHUT_WR)
                else:
                    conn.sendall(data)
            os._exit(0)
        conn.close()


def proxy(port: int, spliced: bool) -> None:
    from isthmus.proxy import Backend, Balancer, ListenerKey, bind_socket, splice
    from isthmus.proxy.metrics import ListenerStats
    from isthmus.proxy.tcp import TcpListener
    from isthmus.runtime.loop import run

    async def serve() -> None:
        kernel = splice.shared() if spliced else None
        if spliced and kernel is None:
            print("note: the kernel refused the splice here: 'spliced' relays too")
        lis = TcpListener(Balancer([Backend(*BACKEND)], None), ListenerStats(), kernel=kernel)
        await lis.start(bind_socket(ListenerKey("TCP", LISTEN, port)))
        await asyncio.sleep(3600)

    run(serve(), choice="uvloop")


def busy_ticks() -> int:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]  # all but idle and iowait


def measure(addr: tuple[str, int], n: int) -> tuple[float, float, float, float]:
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    c = socket.create_connection(addr, timeout=30)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(200):  # warm up; the splice happens at the second
        c.sendall(MESSAGE)
        c.recv(100)
    b0, t0 = busy_ticks(), time.perf_counter()
    for _ in range(n):
        c.sendall(MESSAGE)
        c.recv(100)
    rt_s, rt_ticks = time.perf_counter() - t0, busy_ticks() - b0
    c.sendall(b"STREAM")
    got, buf = 0, bytearray(1 << 20)
    b0, t0 = busy_ticks(), time.perf_counter()
    while k := c.recv_into(buf):
        got += k
    st_s, st_ticks = time.perf_counter() - t0, busy_ticks() - b0
    c.close()
    mib = got / (1 << 20)
    return rt_s / n * 1e6, rt_ticks * tick_us / n, mib / st_s, st_ticks * tick_us / max(mib, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--round-trips", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stream-mib", type=int, default=256)
    a = ap.parse_args()
    children = [
        mp.Process(target=backend, args=(a.stream_mib,), daemon=True),
        mp.Process(target=proxy, args=(8001, False), daemon=True),
        mp.Process(target=proxy, args=(8002, True), daemon=True),
    ]
    for p in children:
        p.start()
    try:
        for _ in range(100):  # wait for the listeners
            try:
                for addr in TARGETS.values():
                    socket.create_connection(addr, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        print(f"{os.cpu_count()} CPUs; {a.round_trips} round trips of {len(MESSAGE)} bytes per target and round, "
              f"then {a.stream_mib} MiB streamed back")
        print(f"{'round':>5} {'target':<8} {'µs/rt':>7} {'+direct':>8} {'CPU µs/rt':>10} {'MiB/s':>7} {'CPU µs/MiB':>11}")
        for r in range(a.rounds):
            direct = 0.0
            for name, addr in TARGETS.items():
                lat, cpu, mbs, cpu_mib = measure(addr, a.round_trips)
                direct = lat if name == "direct" else direct
                print(f"{r + 1:>5} {name:<8} {lat:>7.1f} {lat - direct:>8.1f} {cpu:>10.1f} {mbs:>7.0f} {cpu_mib:>11.0f}")
    finally:
        for p in children:
            p.kill()
            p.join()


if __name__ == "__main__":
    main()
