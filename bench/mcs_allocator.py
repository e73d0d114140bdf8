"""Micro-benchmark of the VIP allocator: prints figures, asserts nothing.

Run: .venv/bin/python bench/mcs_allocator.py [--prefix 16] [--rounds 5]
Target (task brief): all 65,534 addresses of a /16 allocated in at most 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))  # runnable without installing

from isthmus.discovery.allocator import AllocatorFull, VipAllocator


def fill(prefix: int) -> tuple[float, int]:
    """Seconds to allocate every address of a fresh allocator, and how many that was."""
    alloc = VipAllocator(f"243.0.0.0/{prefix}")
    start = time.perf_counter()
    for _ in range(alloc.size):
        alloc.allocate()
    elapsed = time.perf_counter() - start
    try:
        alloc.allocate()
    except AllocatorFull:
        pass
    return elapsed, alloc.used


def churn(prefix: int, ops: int) -> float:
    """Seconds per release+allocate pair on a full allocator (the steady state of a busy cluster)."""
    alloc = VipAllocator(f"243.0.0.0/{prefix}")
    ips = [alloc.allocate() for _ in range(alloc.size)]
    start = time.perf_counter()
    for i in range(ops):
        ip = ips[(i * 7919) % len(ips)]
        alloc.release(ip)
        alloc.allocate()
    return (time.perf_counter() - start) / ops


def rebuild(prefix: int) -> float:
    """Seconds to reserve every address (the agent's start-up scan of ServiceImports)."""
    alloc = VipAllocator(f"243.0.0.0/{prefix}")
    base = VipAllocator(f"243.0.0.0/{prefix}")
    ips = [base.allocate() for _ in range(base.size)]
    start = time.perf_counter()
    for ip in ips:
        alloc.reserve(ip)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prefix", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    fills = [fill(args.prefix) for _ in range(args.rounds)]
    times = [t for t, _ in fills]
    count = fills[0][1]
    print(f"allocate all {count} addresses of a /{args.prefix}:")
    print(f"  best {min(times) * 1000:8.1f} ms   median {statistics.median(times) * 1000:8.1f} ms")
    print(f"  {count / statistics.median(times):,.0f} allocations/s")
    per = churn(args.prefix, 20000)
    print(f"release+allocate on a full /{args.prefix}: {per * 1e6:.2f} us per pair")
    print(f"reserve all addresses (start-up rebuild): {rebuild(args.prefix) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
