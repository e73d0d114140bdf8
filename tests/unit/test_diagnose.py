"""Pure parts of `isthmus diagnose`: CIDR overlaps, the diagnosis document, the table, and the
kubeconfig's context list."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from isthmus.cli.diagnose import render
from isthmus.diagnose.checks import find_overlaps, free_block
from isthmus.diagnose.model import Check, Diagnosis, Status, TargetReport, failed, passed, plural, warned
from isthmus.kube.client import KubeConfigError, context_names


def test_overlaps_between_clusters_and_kinds_only() -> None:
    lines = find_overlaps([
        ("c1", "clusterset-ip", "127.240.0.0/16"),
        ("c2", "clusterset-ip", "127.240.128.0/17"),  # inside c1's block
        ("c1", "pod", "10.1.0.0/16"),
        ("c1", "pod", "10.1.0.0/16"),  # the same range from two nodes: not an overlap
        ("c2", "pod", "10.2.0.0/16"),
        ("c3", "service", "10.2.5.0/24"),  # inside c2's pod range
        ("c3", "pod", "fd00::/64"),  # other family: never compared with IPv4
        ("c4", "pod", "not-a-cidr"),  # ignored
    ])
    assert lines == [
        "c1 clusterset-ip 127.240.0.0/16 overlaps c2 clusterset-ip 127.240.128.0/17",
        "c2 pod 10.2.0.0/16 overlaps c3 service 10.2.5.0/24",
    ]


def test_no_overlap() -> None:
    assert find_overlaps([("c1", "pod", "10.1.0.0/16"), ("c2", "pod", "10.2.0.0/16")]) == []


def _diagnosis(*checks: Check) -> Diagnosis:
    return Diagnosis(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                     [TargetReport("c1", "c1", "https://127.0.0.1:1", ["member"], "c1", list(checks))])


def test_ok_and_counts_warnings_do_not_fail() -> None:
    d = _diagnosis(passed("api", "fine"), warned("clock", "3s off", "sync"), Check("x", Status.SKIP, "not run"))
    assert d.ok
    assert d.counts() == {"pass": 1, "warn": 1, "fail": 0, "skip": 1}
    d.targets[0].checks.append(failed("dns", "no answer", "kubectl get pods", ["127.0.0.1:53: refused"]))
    assert not d.ok
    doc = d.to_dict()
    assert doc["ok"] is False and doc["time"] == "2026-01-02T03:04:05Z"
    assert doc["targets"][0]["checks"][-1] == {"name": "dns", "status": "fail", "message": "no answer",
                                               "next": "kubectl get pods", "details": ["127.0.0.1:53: refused"]}


def test_table_marks_details_and_next_steps() -> None:
    d = _diagnosis(passed("api", "reachable"), failed("heartbeat", "stale", "kubectl logs x", ["detail one"]))
    text = render(d, colour=False)
    assert text.splitlines() == [
        "c1 (member)",
        "  ✔ api        reachable",
        "  ✘ heartbeat  stale",
        "      detail one",
        "      → kubectl logs x",
        "",
        "1 passed, 0 warnings, 1 failed",
    ]


def _kubeconfig(path: Path, current: str | None, names: list[str]) -> Path:
    doc = {"clusters": [{"name": n, "cluster": {"server": f"https://127.0.0.1:{i + 1}"}} for i, n in enumerate(names)],
           "users": [], "contexts": [{"name": n, "context": {"cluster": n}} for n in names]}
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def test_context_names_current_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = _kubeconfig(tmp_path / "a", "c2", ["c1", "c2", "broker"])
    assert context_names(one) == ["c2", "broker", "c1"]
    two = _kubeconfig(tmp_path / "b", None, ["c3"])
    monkeypatch.setenv("KUBECONFIG", f"{one}:{two}:{tmp_path / 'missing'}")
    assert context_names() == ["c2", "broker", "c1", "c3"]
    with pytest.raises(KubeConfigError, match="not found"):
        context_names(tmp_path / "nope")


def test_counts_read_as_english() -> None:
    d = _diagnosis(passed("api", "reachable"), warned("clock", "3s off", "sync"))
    assert render(d, colour=False).splitlines()[-1] == "1 passed, 1 warning, 0 failed"
    assert plural(1, "range") == "1 range" and plural(2, "range") == "2 ranges" and plural(0, "range") == "0 ranges"
    assert plural(1, "process", "processes") == "1 process" and plural(3, "process", "processes") == "3 processes"


def test_two_overlapping_clusterset_blocks_move_to_distinct_free_blocks() -> None:
    ranges = ["243.0.0.0/8"]
    taken = [("c1", "clusterset-ip", "243.0.0.0/16"), ("c2", "clusterset-ip", "243.0.0.0/16"),
             ("c1", "pod", "243.1.0.0/16")]  # a pod range inside the clusterset range: never handed out
    assert free_block(ranges, taken, "c2") == "243.2.0.0/16"
    assert free_block(["243.0.0.0/16"], taken, "c2") is None  # the only block is c1's
