"""Benchmark of the operations drill (issue 43): a member's Isthmus Deployments restarted and each of
its nodes drained while every path carries traffic; prints failed requests per path, the longest
outage, broken long-lived egress flows and how long each disruption took.

Default: the issue's size, runc mode, 3 clusters x 2 nodes (`isthmus demo --drill` with the figures
as JSON at the end). Every client runs inside the clusterset's namespaces; nothing leaves the machine.

Usage: python bench/drill.py [--clusters N] [--nodes N] [--runtime runc|process] [--settle SECONDS]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

# bench/ comes first on sys.path when this runs as a script, and bench/dns.py would shadow dnspython,
# which the drill's DNS probe imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from rich.console import Console  # noqa: E402

from isthmus.local.drill import run_drill  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--runtime", default="runc", choices=("runc", "process"))
    ap.add_argument("--settle", type=float, default=5.0, help="Seconds of steady traffic between disruptions.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-drill-") as tmp:
        t0 = time.monotonic()
        code, result = run_drill(Console(width=160), state_dir=Path(tmp) / "state", clusters=args.clusters,
                                 nodes=args.nodes, runtime=args.runtime, settle=args.settle)
        elapsed = time.monotonic() - t0
    figures = {"clusters": args.clusters, "nodes": args.nodes, "runtime": args.runtime, "exit": code,
               "elapsed_s": round(elapsed, 1), **(result.as_dict() if result else {})}
    print(json.dumps(figures, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
