"""Aggregation and conflict rules (isthmus.discovery.aggregate; docs/discovery.md "Aggregation rules")."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from isthmus.api.mcs import (
    USE_CLUSTERSET_IP_ANNOTATION,
    ClientIPConfig,
    ConflictReason,
    ExportedServiceSpec,
    ServiceImportType,
    ServicePort,
    SessionAffinityConfig,
    conflict_condition,
)
from isthmus.discovery.aggregate import aggregate, decided_ips, derive, port_key, sort_exports

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def export(cluster: str, age: int = 0, **kw: Any) -> ExportedServiceSpec:
    """An export made `age` seconds after T0 (smaller = older)."""
    fields: dict[str, Any] = {
        "cluster": cluster,
        "service_name": "web",
        "service_namespace": "shop",
        "type": ServiceImportType.CLUSTER_SET_IP,
        "ports": [ServicePort(name="http", protocol="TCP", port=80)],
        "export_creation_timestamp": T0 + timedelta(seconds=age),
    }
    fields.update(kw)
    return ExportedServiceSpec(**fields)


def reasons(agg: Any) -> list[str]:
    return [r for r, _ in agg.conflicts]


def test_empty_input_raises() -> None:
    with pytest.raises(ValueError, match="no cluster exports"):
        aggregate([], ips=None, vip_enabled=False)


def test_single_export() -> None:
    agg = aggregate(
        [
            export(
                "c1",
                ip_families=["IPv4"],
                internal_traffic_policy="Local",
                traffic_distribution="PreferClose",
                clusterset_ip_enabled=True,
            )
        ],
        ips=["243.0.0.1"],
        vip_enabled=True,
    )
    assert agg.spec.type == ServiceImportType.CLUSTER_SET_IP
    assert agg.spec.ips == ["243.0.0.1"]
    assert agg.spec.ip_families == ["IPv4"]
    assert agg.spec.internal_traffic_policy == "Local"
    assert agg.spec.traffic_distribution == "PreferClose"
    assert [p.name for p in agg.spec.ports] == ["http"]
    assert agg.clusters == ["c1"]
    assert agg.conflicts == []
    assert agg.conflicting_clusters == set()
    assert agg.labels == {} and agg.annotations == {}


def test_ips_passed_through_as_given() -> None:
    assert aggregate([export("c1")], ips=None, vip_enabled=False).spec.ips is None
    assert aggregate([export("c1")], ips=[], vip_enabled=False).spec.ips == []


def test_clusters_sorted() -> None:
    agg = aggregate([export("zeta", 0), export("alpha", 5), export("mid", 2)], ips=None, vip_enabled=False)
    assert agg.clusters == ["alpha", "mid", "zeta"]


def test_oldest_by_timestamp_wins_type_and_affinity() -> None:
    older = export("zz", 0, type=ServiceImportType.HEADLESS, session_affinity="ClientIP")
    newer = export("aa", 10)
    agg = aggregate([newer, older], ips=None, vip_enabled=False)
    assert agg.spec.type == ServiceImportType.HEADLESS
    assert agg.spec.session_affinity == "ClientIP"
    assert reasons(agg) == [ConflictReason.TYPE, ConflictReason.SESSION_AFFINITY]
    assert agg.conflicts[0][1] == "type is Headless in cluster zz (oldest) but ClusterSetIP in cluster aa"
    assert agg.conflicts[1][1] == "session affinity is ClientIP in cluster zz (oldest) but None in cluster aa"
    assert agg.conflicting_clusters == {"aa"}


def test_timestamp_tie_broken_by_cluster_id() -> None:
    a = export("a", 0, type=ServiceImportType.HEADLESS)
    b = export("b", 0)
    agg = aggregate([b, a], ips=None, vip_enabled=False)
    assert agg.spec.type == ServiceImportType.HEADLESS
    assert agg.conflicting_clusters == {"b"}
    assert "in cluster a (oldest)" in agg.conflicts[0][1]


def test_sub_second_differences_are_ties() -> None:
    """metav1.Time has second precision: a few ms apart is a tie, decided by cluster ID."""
    b = export("b", 0, type=ServiceImportType.HEADLESS)
    a = ExportedServiceSpec.model_validate(
        {**export("a").model_dump(), "exportCreationTimestamp": T0 + timedelta(milliseconds=300)}
    )
    assert [e.cluster for e in sort_exports([b, a])] == ["a", "b"]


def test_ports_union_by_name_in_first_seen_order_and_a_port_conflict() -> None:
    """KEP-1645 "Service Port": the union, and a PortConflict because the sets are not identical."""
    c1 = export("c1", 0, ports=[ServicePort(name="http", port=80), ServicePort(name="metrics", port=9090)])
    c2 = export("c2", 1, ports=[ServicePort(name="grpc", port=9000), ServicePort(name="http", port=80)])
    agg = aggregate([c2, c1], ips=None, vip_enabled=False)
    assert [(p.name, p.port) for p in agg.spec.ports] == [("http", 80), ("metrics", 9090), ("grpc", 9000)]
    assert agg.conflicts == [
        (ConflictReason.PORT, 'port "metrics" (TCP/9090) of cluster c1 (oldest) is not in cluster c2'),
        (ConflictReason.PORT, 'port "grpc" (TCP/9000) of cluster c2 is not in cluster c1 (oldest)'),
    ]
    assert agg.served == {"c1": {("http", "TCP"), ("metrics", "TCP")}, "c2": {("http", "TCP"), ("grpc", "TCP")}}


def test_identical_port_sets_in_another_order_do_not_conflict() -> None:
    c1 = export("c1", 0, ports=[ServicePort(name="a", port=1), ServicePort(name="b", port=2, protocol="UDP")])
    c2 = export("c2", 1, ports=[ServicePort(name="b", port=2, protocol="UDP"), ServicePort(name="a", port=1)])
    assert aggregate([c1, c2], ips=None, vip_enabled=False).conflicts == []


def test_conformance_case_10_extra_port_is_a_union_and_a_conflict() -> None:
    """mcs-api conformance "…should expose the union of the constituent service ports and raise a conflict"."""
    c0 = export("c0", 0, ports=[ServicePort(name="tcp", port=42), ServicePort(name="udp", protocol="UDP", port=42)])
    c1 = export("c1", 2, ports=[ServicePort(name="tcp", port=42), ServicePort(name="stcp", protocol="SCTP", port=142)])
    agg = aggregate([c1, c0], ips=None, vip_enabled=False)
    assert {(p.name, p.protocol, p.port) for p in agg.spec.ports} == {
        ("tcp", "TCP", 42), ("udp", "UDP", 42), ("stcp", "SCTP", 142)}
    assert set(reasons(agg)) == {ConflictReason.PORT}
    assert agg.served == {"c0": {("tcp", "TCP"), ("udp", "UDP")}, "c1": {("tcp", "TCP"), ("stcp", "SCTP")}}


def test_conformance_case_11_same_name_other_number_keeps_the_oldest() -> None:
    """mcs-api conformance "…with conflicting ports should apply the conflict resolution policy"; and
    case 26: the port goes only to the cluster exposing it as the ServiceImport does."""
    c0 = export("c0", 0, ports=[ServicePort(name="tcp", port=42), ServicePort(name="udp", protocol="UDP", port=42)])
    c1 = export("c1", 2, ports=[ServicePort(name="tcp", port=43)])
    agg = aggregate([c1, c0], ips=None, vip_enabled=False)
    assert [(p.name, p.protocol, p.port) for p in agg.spec.ports] == [("tcp", "TCP", 42), ("udp", "UDP", 42)]
    assert agg.conflicts == [
        (ConflictReason.PORT, 'port "tcp" is TCP/42 in cluster c0 (oldest) but TCP/43 in cluster c1'),
        (ConflictReason.PORT, 'port "udp" (UDP/42) of cluster c0 (oldest) is not in cluster c1'),
    ]
    assert agg.served == {"c0": {("tcp", "TCP"), ("udp", "UDP")}, "c1": frozenset()}


def test_ports_merge_by_protocol_and_number_after_the_name() -> None:
    """Case 27 keeps both names (other numbers); the same protocol and number under two names keeps
    the oldest's name only, and the other cluster is not sent that port's traffic."""
    c0 = export("c0", 0, ports=[ServicePort(name="tcp", port=42)])
    c1 = export("c1", 1, ports=[ServicePort(name="tcp2", port=4242)])
    agg = aggregate([c0, c1], ips=None, vip_enabled=False)
    assert [(p.name, p.port) for p in agg.spec.ports] == [("tcp", 42), ("tcp2", 4242)]
    assert agg.served == {"c0": {("tcp", "TCP")}, "c1": {("tcp2", "TCP")}}
    c2 = export("c2", 2, ports=[ServicePort(name="web", port=42), ServicePort(name="dns", protocol="UDP", port=42)])
    agg = aggregate([c0, c2], ips=None, vip_enabled=False)
    assert [(p.name, p.protocol, p.port) for p in agg.spec.ports] == [("tcp", "TCP", 42), ("dns", "UDP", 42)]
    assert agg.served["c2"] == {("dns", "UDP")}
    assert set(reasons(agg)) == {ConflictReason.PORT}


def test_port_conflict_number() -> None:
    c1 = export("c1", 0, ports=[ServicePort(name="http", port=80)])
    c2 = export("c2", 1, ports=[ServicePort(name="http", port=8080)])
    agg = aggregate([c1, c2], ips=None, vip_enabled=False)
    assert [(p.name, p.port) for p in agg.spec.ports] == [("http", 80)]
    assert agg.conflicts == [
        (ConflictReason.PORT, 'port "http" is TCP/80 in cluster c1 (oldest) but TCP/8080 in cluster c2')
    ]
    assert agg.conflicting_clusters == {"c2"}


def test_port_conflict_protocol_and_app_protocol() -> None:
    c1 = export("c1", 0, ports=[ServicePort(name="dns", protocol="UDP", port=53)])
    c2 = export("c2", 1, ports=[ServicePort(name="dns", protocol="TCP", port=53)])
    c3 = export("c3", 2, ports=[ServicePort(name="dns", protocol="UDP", port=53, app_protocol="dns")])
    agg = aggregate([c3, c2, c1], ips=None, vip_enabled=False)
    assert reasons(agg) == [ConflictReason.PORT, ConflictReason.PORT]
    assert agg.conflicts[0][1] == 'port "dns" is UDP/53 in cluster c1 (oldest) but TCP/53 in cluster c2'
    assert agg.conflicts[1][1] == (
        'port "dns" is UDP/53 in cluster c1 (oldest) but UDP/53 with appProtocol dns in cluster c3'
    )
    assert agg.conflicting_clusters == {"c2", "c3"}


def test_port_oldest_definer_not_oldest_exporter() -> None:
    """The winner of a name is the oldest cluster *defining* it; differences are told against the oldest."""
    c1 = export("c1", 0, ports=[ServicePort(name="http", port=80)])
    c2 = export("c2", 1, ports=[ServicePort(name="admin", port=81)])
    c3 = export("c3", 2, ports=[ServicePort(name="admin", port=82)])
    agg = aggregate([c1, c2, c3], ips=None, vip_enabled=False)
    assert [(p.name, p.port) for p in agg.spec.ports] == [("http", 80), ("admin", 81)]
    assert 'port "admin" (TCP/82) of cluster c3 is not in cluster c1 (oldest)' in [m for _, m in agg.conflicts]
    assert agg.conflicting_clusters == {"c2", "c3"}
    assert agg.served["c3"] == frozenset() and agg.served["c2"] == {("admin", "TCP")}


def test_unnamed_ports_are_one_name() -> None:
    """The unnamed port is the name "": a ServiceImport may not repeat it, so the oldest's wins."""
    c1 = export("c1", 0, ports=[ServicePort(port=80)])
    c2 = export("c2", 1, ports=[ServicePort(port=80)])
    c3 = export("c3", 2, ports=[ServicePort(port=80, protocol="UDP")])
    c4 = export("c4", 3, ports=[ServicePort(port=80, app_protocol="http")])
    agg = aggregate([c1, c2, c3, c4], ips=None, vip_enabled=False)
    assert [(p.port, p.protocol) for p in agg.spec.ports] == [(80, "TCP")]
    assert agg.conflicts == [
        (ConflictReason.PORT, "the unnamed port is TCP/80 in cluster c1 (oldest) but UDP/80 in cluster c3"),
        (
            ConflictReason.PORT,
            "the unnamed port is TCP/80 in cluster c1 (oldest) but TCP/80 with appProtocol http in cluster c4",
        ),
    ]
    assert agg.served == {"c1": {("", "TCP")}, "c2": {("", "TCP")}, "c3": frozenset(), "c4": {("", "TCP")}}
    assert port_key(ServicePort(port=80)) == ""
    assert port_key(ServicePort(name="x", port=80)) == "x"


def test_empty_ports() -> None:
    agg = aggregate([export("c1", ports=[])], ips=None, vip_enabled=False)
    assert agg.spec.ports == []


def test_session_affinity_config_conflict() -> None:
    cfg = SessionAffinityConfig(client_ip=ClientIPConfig(timeout_seconds=100))
    other = SessionAffinityConfig(client_ip=ClientIPConfig(timeout_seconds=200))
    c1 = export("c1", 0, session_affinity="ClientIP", session_affinity_config=cfg)
    c2 = export("c2", 1, session_affinity="ClientIP", session_affinity_config=other)
    c3 = export("c3", 2, session_affinity="ClientIP")
    agg = aggregate([c1, c2, c3], ips=None, vip_enabled=False)
    assert agg.spec.session_affinity_config == cfg
    assert agg.spec.session_affinity_config is not cfg
    assert reasons(agg) == [ConflictReason.SESSION_AFFINITY_CONFIG] * 2
    assert (
        agg.conflicts[0][1] == "session affinity timeout is 100 in cluster c1 (oldest) but 200 in cluster c2"
    )
    assert (
        agg.conflicts[1][1]
        == "session affinity timeout is 100 in cluster c1 (oldest) but unset in cluster c3"
    )


def test_affinity_unset_equals_none() -> None:
    agg = aggregate([export("c1", 0), export("c2", 1, session_affinity="None")], ips=None, vip_enabled=False)
    assert agg.conflicts == []
    empty = SessionAffinityConfig()
    agg = aggregate(
        [export("c1", 0), export("c2", 1, session_affinity_config=empty)], ips=None, vip_enabled=False
    )
    assert agg.conflicts == []


def test_affinity_config_not_compared_when_affinity_differs() -> None:
    cfg = SessionAffinityConfig(client_ip=ClientIPConfig(timeout_seconds=100))
    c1 = export("c1", 0, session_affinity="ClientIP", session_affinity_config=cfg)
    c2 = export("c2", 1)
    assert reasons(aggregate([c1, c2], ips=None, vip_enabled=False)) == [ConflictReason.SESSION_AFFINITY]


def test_labels_and_annotations_oldest_whole_set_wins() -> None:
    """KEP-1645: when the sets differ the oldest export's set is used as a whole, never a union."""
    c1 = export("c1", 0, exported_labels={"team": "a", "tier": "web"}, exported_annotations={"note": "x"})
    c2 = export(
        "c2", 1, exported_labels={"team": "b", "env": "prod"}, exported_annotations={"note": "y", "o": "1"}
    )
    c3 = export("c3", 2, exported_labels={"team": "a", "tier": "web"}, exported_annotations={"note": "x"})
    agg = aggregate([c3, c2, c1], ips=None, vip_enabled=False)
    assert agg.labels == {"team": "a", "tier": "web"}
    assert agg.annotations == {"note": "x"}
    assert agg.conflicts == [
        (
            ConflictReason.LABELS,
            "exported labels of cluster c2 differ from those of cluster c1 (oldest, whose set is used): "
            '"env" is only in cluster c2; "team" is "a" in cluster c1 but "b" in cluster c2; '
            '"tier" is only in cluster c1',
        ),
        (
            ConflictReason.ANNOTATIONS,
            "exported annotations of cluster c2 differ from those of cluster c1 (oldest, whose set is used): "
            '"note" is "x" in cluster c1 but "y" in cluster c2; "o" is only in cluster c2',
        ),
    ]
    assert agg.conflicting_clusters == {"c2"}


def test_labels_differing_only_by_extra_keys_conflict() -> None:
    """No key disagrees, yet the sets are not identical: still a conflict, and no key is added."""
    c1 = export("c1", 0, exported_labels={"tier": "web"})
    c2 = export("c2", 1, exported_labels={"tier": "web", "extra": "1"})
    agg = aggregate([c1, c2], ips=None, vip_enabled=False)
    assert agg.labels == {"tier": "web"}
    assert reasons(agg) == [ConflictReason.LABELS]
    assert agg.conflicting_clusters == {"c2"}


def test_no_labels_is_the_empty_set_and_differs() -> None:
    c1 = export("c1", 0)
    c2 = export("c2", 1, exported_annotations={"note": "x"})
    agg = aggregate([c1, c2], ips=None, vip_enabled=False)
    assert agg.annotations == {}, "the oldest export's (empty) set wins"
    assert reasons(agg) == [ConflictReason.ANNOTATIONS]
    assert agg.conflicts[0][1].endswith('"note" is only in cluster c2')
    # the other way round: the newer exporter without any is the one in conflict
    agg = aggregate(
        [export("c1", 0, exported_labels={"k": "v"}), export("c2", 1)], ips=None, vip_enabled=False
    )
    assert agg.labels == {"k": "v"} and reasons(agg) == [ConflictReason.LABELS]
    assert agg.conflicting_clusters == {"c2"}


def test_identical_sets_and_empty_equals_unset_do_not_conflict() -> None:
    c1 = export("c1", 0, exported_labels={"a": "1", "b": "2"}, exported_annotations={})
    c2 = export("c2", 1, exported_labels={"b": "2", "a": "1"})
    agg = aggregate([c1, c2], ips=None, vip_enabled=False)
    assert agg.conflicts == [] and agg.labels == {"a": "1", "b": "2"} and agg.annotations == {}


def test_label_conflict_message_is_capped() -> None:
    c1 = export("c1", 0, exported_labels={f"k{i}": "old" for i in range(6)})
    c2 = export("c2", 1, exported_labels={f"k{i}": "new" for i in range(6)})
    message = aggregate([c1, c2], ips=None, vip_enabled=False).conflicts[0][1]
    assert '"k0"' in message and '"k2"' in message and '"k3"' not in message
    assert message.endswith("and 3 more")


def test_labels_set_of_an_older_non_oldest_cluster_is_not_used() -> None:
    c1 = export("c1", 0)
    c2 = export("c2", 1, exported_labels={"k": "v2"})
    c3 = export("c3", 2, exported_labels={"k": "v2"})
    agg = aggregate([c1, c2, c3], ips=None, vip_enabled=False)
    assert agg.labels == {}
    assert agg.conflicting_clusters == {"c2", "c3"}
    assert [m.split(":")[0] for _, m in agg.conflicts] == [
        "exported labels of cluster c2 differ from those of cluster c1 (oldest, whose set is used)",
        "exported labels of cluster c3 differ from those of cluster c1 (oldest, whose set is used)",
    ]


def test_vip_enablement_conflict_any_exporter() -> None:
    c1 = export("c1", 0, clusterset_ip_enabled=True)
    c2 = export("c2", 1, clusterset_ip_enabled=False)
    agg = aggregate([c1, c2], ips=["243.0.0.1"], vip_enabled=True)
    assert reasons(agg) == [ConflictReason.CLUSTERSET_IP_ENABLEMENT]
    message = agg.conflicts[0][1]
    assert "cluster c2" in message
    assert f"{USE_CLUSTERSET_IP_ANNOTATION}=false" in message
    assert f"{USE_CLUSTERSET_IP_ANNOTATION}=true" in message
    assert agg.conflicting_clusters == {"c2"}


def test_vip_enablement_checked_against_fixed_setting_even_for_oldest() -> None:
    """The aggregate's setting is fixed at creation; if the oldest later changes, it conflicts too."""
    c1 = export("c1", 0, clusterset_ip_enabled=True)
    agg = aggregate([c1], ips=None, vip_enabled=False)
    assert reasons(agg) == [ConflictReason.CLUSTERSET_IP_ENABLEMENT]
    assert agg.conflicting_clusters == {"c1"}


def test_headless_export_is_not_compared_for_vip_enablement() -> None:
    """A headless export has no VIP: its (forced False) setting is no ClusterSetIPEnablementConflict."""
    c1 = export("c1", 0, clusterset_ip_enabled=True)
    c2 = export("c2", 1, type=ServiceImportType.HEADLESS, clusterset_ip_enabled=False)
    agg = aggregate([c1, c2], ips=["243.0.0.1"], vip_enabled=True)
    assert reasons(agg) == [ConflictReason.TYPE]
    # the only exporter, turned headless under an aggregate created with a VIP
    c1_headless = export("c1", 0, type=ServiceImportType.HEADLESS, clusterset_ip_enabled=False)
    assert aggregate([c1_headless], ips=["243.0.0.1"], vip_enabled=True).conflicts == []


def test_headless_aggregate_is_not_compared_for_vip_enablement() -> None:
    c1 = export("c1", 0, type=ServiceImportType.HEADLESS)
    c2 = export("c2", 1, clusterset_ip_enabled=True)
    agg = aggregate([c1, c2], ips=None, vip_enabled=False)
    assert reasons(agg) == [ConflictReason.TYPE]
    # once the headless export is gone, the ClusterSetIP one is compared again
    assert reasons(aggregate([c2], ips=None, vip_enabled=False)) == [ConflictReason.CLUSTERSET_IP_ENABLEMENT]


def test_conflict_order_is_fixed_and_condition_builds() -> None:
    c1 = export(
        "c1",
        0,
        session_affinity="ClientIP",
        exported_labels={"a": "1"},
        exported_annotations={"b": "1"},
        clusterset_ip_enabled=True,
    )
    c2 = export(
        "c2",
        1,
        type=ServiceImportType.HEADLESS,
        ports=[ServicePort(name="http", port=81)],
        exported_labels={"a": "2"},
        exported_annotations={"b": "2"},
        internal_traffic_policy="Local",
        traffic_distribution="PreferClose",
        ip_families=["IPv6"],
    )
    c3 = export(
        "c3",
        2,
        session_affinity="ClientIP",
        exported_labels={"a": "1"},
        exported_annotations={"b": "1"},
        clusterset_ip_enabled=False,
    )
    agg = aggregate([c3, c2, c1], ips=["243.0.0.9"], vip_enabled=True)
    assert reasons(agg) == [
        "TypeConflict",
        "PortConflict",
        "SessionAffinityConflict",
        "InternalTrafficPolicyConflict",
        "TrafficDistributionConflict",
        "IPFamilyConflict",
        "LabelsConflict",
        "AnnotationsConflict",
        "ClusterSetIPEnablementConflict",
    ]
    assert all(type(r) is str for r in reasons(agg))
    cond = conflict_condition(agg.conflicts)
    assert cond.status == "True"
    assert cond.reason == ",".join(reasons(agg))
    assert "cluster c2" in cond.message


def test_deterministic_under_input_permutations() -> None:
    exports = [
        export("c1", 5, ports=[ServicePort(name="a", port=1)], exported_labels={"x": "1"}),
        export("c2", 0, ports=[ServicePort(name="a", port=2), ServicePort(name="b", port=3)]),
        export("c3", 5, ports=[ServicePort(name="b", port=4)], exported_labels={"x": "2", "y": "y"}),
        export("c4", 3, type=ServiceImportType.HEADLESS, clusterset_ip_enabled=True),
    ]
    results = set()
    for perm in itertools.permutations(exports):
        agg = aggregate(list(perm), ips=None, vip_enabled=False)
        results.add(
            (
                agg.spec.model_dump_json(),
                tuple(agg.clusters),
                tuple(agg.labels.items()),
                tuple(agg.conflicts),
                tuple(sorted(agg.conflicting_clusters)),
            )
        )
    assert len(results) == 1


def test_duplicate_cluster_keeps_oldest_entry() -> None:
    old = export("c1", 0, ports=[ServicePort(name="http", port=80)])
    dup = export("c1", 9, ports=[ServicePort(name="http", port=81)])
    agg = aggregate([dup, old], ips=None, vip_enabled=False)
    assert agg.clusters == ["c1"]
    assert agg.conflicts == []
    assert agg.spec.ports[0].port == 80


def test_inputs_not_mutated() -> None:
    c1 = export("c1", 0, ip_families=["IPv4"])
    before = c1.model_dump_json()
    agg = aggregate([c1], ips=None, vip_enabled=False)
    assert agg.spec.ip_families is not c1.ip_families
    agg.spec.ports[0].port = 1
    assert c1.model_dump_json() == before


def test_every_reader_derives_the_same_vip_from_the_exporters_decisions() -> None:
    """docs/discovery.md "ClusterSet IP": no aggregate is stored; the VIP is the oldest decision."""
    undecided = export("c1", clusterset_ip_enabled=True)
    assert decided_ips([undecided]) is None and derive([undecided]) is None  # no import before a decision
    c1 = export("c1", 0, clusterset_ip_enabled=True, clusterset_ips=["243.0.0.1"], clusterset_ip_allocated_by="c1")
    c2 = export("c2", 1, clusterset_ip_enabled=True, clusterset_ips=["243.1.0.1"], clusterset_ip_allocated_by="c2")
    for order in itertools.permutations([c1, c2, export("c3", 2, clusterset_ip_enabled=True)]):
        d = derive(list(order))  # two first exporters raced: the older one's VIP, in any order
        assert d is not None and (d.ips, d.allocated_by, d.vip_enabled) == (["243.0.0.1"], "c1", True)
        assert d.result.spec.ips == ["243.0.0.1"] and d.result.clusters == ["c1", "c2", "c3"]
    # The allocator left; c2 adopted its VIP, which stays.
    adopted = export("c2", 1, clusterset_ip_enabled=True, clusterset_ips=["243.0.0.1"], clusterset_ip_allocated_by="c1")
    d = derive([adopted])
    assert d is not None and (d.ips, d.allocated_by) == (["243.0.0.1"], "c1")
    # A decision of "no VIP" holds against a later export that asks for one (a conflict, no flip).
    d = derive([export("c1", 0, clusterset_ips=[]), export("c2", 1, clusterset_ip_enabled=True)])
    assert d is not None and not d.vip_enabled and d.result.spec.ips is None
    assert reasons(d.result) == [ConflictReason.CLUSTERSET_IP_ENABLEMENT]
    # A headless service has no VIP, whatever an exporter holds.
    d = derive([export("c1", 0, type=ServiceImportType.HEADLESS, clusterset_ips=[]), c2])
    assert d is not None and d.ips == [] and d.result.spec.ips is None


def test_internal_traffic_policy_and_traffic_distribution_oldest_wins() -> None:
    c1 = export("c1", 0, internal_traffic_policy="Local", traffic_distribution="PreferClose")
    c2 = export("c2", 1, internal_traffic_policy="Cluster")
    c3 = export("c3", 2, internal_traffic_policy="Local", traffic_distribution="PreferClose")
    agg = aggregate([c3, c2, c1], ips=None, vip_enabled=False)
    assert (agg.spec.internal_traffic_policy, agg.spec.traffic_distribution) == ("Local", "PreferClose")
    assert agg.conflicts == [
        (ConflictReason.INTERNAL_TRAFFIC_POLICY,
         "internal traffic policy is Local in cluster c1 (oldest) but Cluster in cluster c2"),
        (ConflictReason.TRAFFIC_DISTRIBUTION,
         "traffic distribution is PreferClose in cluster c1 (oldest) but unset in cluster c2"),
    ]
    assert agg.conflicting_clusters == {"c2"}


def test_unset_internal_traffic_policy_is_cluster() -> None:
    agg = aggregate([export("c1", 0, internal_traffic_policy="Cluster"), export("c2", 1)], ips=None,
                    vip_enabled=False)
    assert agg.conflicts == []


def test_ip_family_conflict_only_when_an_exporter_lacks_a_family_of_the_import() -> None:
    dual = export("c1", 0, type=ServiceImportType.HEADLESS, ip_families=["IPv6", "IPv4"])
    v4 = export("c2", 1, type=ServiceImportType.HEADLESS, ip_families=["IPv4"])
    agg = aggregate([v4, dual], ips=None, vip_enabled=False)
    assert agg.spec.ip_families == ["IPv6", "IPv4"], "the oldest's order"
    assert agg.conflicts == [
        (ConflictReason.IP_FAMILY, "the Service in cluster c2 has IP families IPv4 but the service is imported "
                                   "as IPv6, IPv4: its endpoints are not reached over IPv6"),
    ]
    # The other way round the import is IPv4 only: c2's extra IPv6 reaches nothing, no conflict.
    agg = aggregate([export("c1", 0, ip_families=["IPv4"]), export("c2", 1, ip_families=["IPv4", "IPv6"])],
                    ips=None, vip_enabled=False)
    assert agg.spec.ip_families == ["IPv4"] and agg.conflicts == []
    # A view without ipFamilies (from an older agent) says nothing.
    assert aggregate([dual, export("c3", 2, type=ServiceImportType.HEADLESS)], ips=None,
                     vip_enabled=False).conflicts == []


def test_ip_families_never_empty_and_follow_the_clusterset_ips() -> None:
    """Headless imports have ipFamilies too (the conformance suite waits for them); with ClusterSet IPs
    len(ips) == len(ipFamilies), in the same order (conformance case 8)."""
    headless = aggregate([export("c1", type=ServiceImportType.HEADLESS)], ips=None, vip_enabled=False)
    assert headless.spec.ip_families == ["IPv4"]
    late = aggregate([export("c1", 0), export("c2", 1, ip_families=["IPv6"])], ips=None, vip_enabled=False)
    assert late.spec.ip_families == ["IPv6"], "the first exporter that says"
    vip = aggregate([export("c1", ip_families=["IPv6", "IPv4"])], ips=["243.0.0.1"], vip_enabled=True)
    assert vip.spec.ip_families == ["IPv4"] and len(vip.spec.ips or []) == 1
    both = aggregate([export("c1", ip_families=["IPv4", "IPv6"])], ips=["fd00::1", "243.0.0.1"], vip_enabled=True)
    assert both.spec.ip_families == ["IPv6", "IPv4"]
    assert aggregate([export("c1", ip_families=["IPv4", "IPv4"])], ips=None,
                     vip_enabled=False).spec.ip_families == ["IPv4"], "never a family twice"
