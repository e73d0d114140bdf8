"""The pure parts of the clusterset-level metrics: an export's state from its conditions, conflict
types, heartbeat ages from the broker's Cluster objects, a pool's health, the DNS cluster label
across --workers snapshots, and the gateway's owned source IPs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from isthmus.api.mcs import AGENT_FIELD_MANAGER, HEARTBEAT_ANNOTATION
from isthmus.discovery.metrics import EXPORT_STATES, conflict_types, export_state, heartbeat_ages
from isthmus.dns.metrics import DnsStats, add_snapshots
from isthmus.egress.gateway import GatewayRuntime
from isthmus.exposure.metrics import exposure_summary
from isthmus.haproxy.metrics import pool_health
from isthmus.runtime import REGISTRY

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def export(*conds: tuple[str, str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "ns"},
            "status": {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conds]}}


@pytest.mark.parametrize(("conds", "state"), [
    ((), "pending"),
    ((("Valid", "True", "Valid"), ("Ready", "False", "Pending")), "pending"),
    ((("Valid", "False", "NoService"), ("Ready", "False", "Pending")), "invalid"),
    ((("Valid", "True", "Valid"), ("Ready", "False", "Failed")), "failed"),
    ((("Valid", "True", "Valid"), ("Ready", "True", "Exported"), ("Conflict", "False", "NoConflicts")), "valid"),
    ((("Valid", "True", "Valid"), ("Ready", "True", "Exported"), ("Conflict", "True", "PortConflict")), "conflict"),
])
def test_export_state(conds: tuple[tuple[str, str, str], ...], state: str) -> None:
    assert state in EXPORT_STATES
    assert export_state(export(*conds)) == state


def test_conflict_types_split_the_joined_reasons() -> None:
    assert conflict_types(export(("Conflict", "True", "PortConflict,TypeConflict"))) == ["PortConflict",
                                                                                          "TypeConflict"]
    assert conflict_types(export(("Conflict", "False", "NoConflicts"))) == []
    assert conflict_types(export()) == []


def cluster(name: str, beat: datetime | None = None, written: datetime | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "isthmus-broker"}
    if beat is not None:
        meta["annotations"] = {HEARTBEAT_ANNOTATION: beat.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if written is not None:
        meta["managedFields"] = [
            {"manager": AGENT_FIELD_MANAGER, "operation": "Update", "subresource": "status",
             "time": (written + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")},
            {"manager": AGENT_FIELD_MANAGER, "operation": "Update", "time": written.strftime("%Y-%m-%dT%H:%M:%SZ")},
        ]
    return {"apiVersion": "isthmus.io/v1alpha1", "kind": "Cluster", "metadata": meta}


def test_heartbeat_ages_own_from_its_annotation_peers_from_what_the_agent_saw() -> None:
    clusters = [cluster("c1", beat=NOW - timedelta(seconds=4)), cluster("c2"), cluster("c3")]
    ages = heartbeat_ages("c1", clusters, {"c2": 7.5, "c3": None}, NOW)
    assert ages["c1"] == 4 and ages["c2"] == 7.5
    assert "c3" not in ages, "never seen, no broker times: no figure rather than a made-up one"


def test_heartbeat_age_of_a_peer_silent_at_start_comes_from_the_broker_clock() -> None:
    # The broker's clock runs 100 s ahead of ours: only differences of its own times are used.
    skew = timedelta(seconds=100)
    clusters = [cluster("c1", beat=NOW - timedelta(seconds=2), written=NOW - timedelta(seconds=2) + skew),
                cluster("c2", written=NOW - timedelta(seconds=92) + skew)]
    ages = heartbeat_ages("c1", clusters, {"c2": None}, NOW)
    assert ages == {"c1": 2, "c2": 92}


def test_pool_health_reads_spec_and_status() -> None:
    obj = {"metadata": {"name": "p"}, "spec": {"count": 3},
           "status": {"readyInstances": 2, "conditions": [{"type": "Ready", "status": "True"}]}}
    assert pool_health(obj) == ("p", 3, 2, True)
    assert pool_health({"metadata": {"name": "q"}, "spec": {}}) == ("q", 0, 0, False)


def test_dns_answers_carry_the_cluster_through_worker_snapshots() -> None:
    worker = DnsStats(cluster="metrics-c7")
    worker.queries[(1, 3)] += 2  # A, NXDOMAIN
    parent = DnsStats(worker=0)  # the parent's copy of worker 0 learns the cluster from the snapshot
    parent.load(add_snapshots(worker.snapshot(), worker.snapshot()))
    assert parent.cluster == "metrics-c7"
    assert REGISTRY.get_sample_value("isthmus_dns_answers_total", {"cluster": "metrics-c7", "rcode": "NXDOMAIN"}) == 6
    del worker, parent


def test_gateway_source_ips_count_distinct_addresses_while_programmed() -> None:
    gw = GatewayRuntime(client=object(), namespace="isthmus-system", identity="g", relay_ip="127.0.0.1")  # type: ignore[arg-type]
    before = REGISTRY.get_sample_value("isthmus_egress_gateway_source_ips") or 0
    gw.egress = {("TCP", "127.32.1.1", "127.0.0.9", 80): frozenset(), ("UDP", "127.32.1.1", "127.0.0.9", 53): frozenset(),
                 ("TCP", "127.32.1.2", "127.0.0.9", 80): frozenset()}
    gw.ingress = {("TCP", "127.32.1.3", 8080): object()}  # type: ignore[dict-item]
    assert REGISTRY.get_sample_value("isthmus_egress_gateway_source_ips") == before, "not leading: owns nothing"
    gw.programmed = True
    assert REGISTRY.get_sample_value("isthmus_egress_gateway_source_ips") == before + 3


def test_exposure_summary() -> None:
    obj = {"spec": {"types": ["CrossCluster", "LoadBalancer"]},
           "status": {"conditions": [{"type": "LoadBalancerReady", "status": "True"}, {"type": "Ready", "status": "False"}]}}
    assert exposure_summary(obj) == (["CrossCluster", "LoadBalancer"], "false")
    assert exposure_summary({"spec": {"types": ["CrossCluster"]}}) == (["CrossCluster"], "unknown")
