"""The operations drill end to end (runc mode, two nodes per cluster): every Isthmus Deployment of a
member restarted and each of its nodes drained while DNS, ClusterSet-IP, pool, MultiClusterService
and egress traffic runs; then the member and the broker uninstalled as docs/deploy.md says, leaving
other projects' CRDs and the user's objects.

What is asserted is the issue's targets: no failed DNS query, ClusterSet-IP request, pool request or
MultiClusterService request; egress's new connections succeed again within 3 s of any failure (the
long-lived flows on a moved gateway may break: userspace mode fails closed); every path serving at the
end; the uninstall leaving what is not Isthmus's. The size is what `make test`'s budget allows
(2 clusters x 2 nodes); `bench/drill.py` runs 3 x 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rich.console import Console

from isthmus.local.drill import EGRESS_RECOVERY, ZERO_FAILURE_PATHS, run_drill

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed"),
    pytest.mark.clusterset,
    pytest.mark.timeout(1200),  # runc clusters of two nodes, a restart and two drains (the ini's 120 s is for one step)
]


def test_restart_and_drain_under_traffic_then_uninstall_keeping_what_is_not_ours(tmp_path: Path) -> None:
    console = Console(width=160, force_terminal=False)
    _, result = run_drill(console, state_dir=tmp_path / "state", clusters=2, nodes=2, runtime="runc", settle=2.0)
    assert result is not None, "the drill stopped before its traffic was counted: see the output above"
    counts = result.as_dict()
    for path, r in counts["paths"].items():
        assert r["sent"] > 50, (path, counts)
        assert r["last_ok"], (path, counts)  # serving again after every restart and drain
    for path in ZERO_FAILURE_PATHS:
        assert counts["paths"][path]["failed"] == 0, (path, counts)
    assert counts["paths"]["egress"]["longest_outage_s"] <= EGRESS_RECOVERY, counts
    assert counts["misses"] == [], counts
    assert len(counts["phases_s"]) == 3, counts  # the restarts and one drain per node
    assert counts["uninstalled"], "the uninstall failed or took what is not Isthmus's: see the output above"
