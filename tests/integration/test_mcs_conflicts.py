"""Conflict resolution (KEP-1645): oldest export wins, the Conflict condition is set on
every exporting cluster and cleared everywhere when resolved (docs/discovery.md "Aggregation rules")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
import pytest_asyncio

from isthmus.api.mcs import (
    CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION,
    USE_CLUSTERSET_IP_ANNOTATION,
    ConditionType,
    ConflictReason,
    ServiceImportType,
    ValidReason,
)
from tests.harness.clusterset import (
    SE,
    ClusterSet,
    addresses_of,
    annotations_of,
    cond_is,
    condition,
    ips_of,
    labels_of,
    ports_of,
    reasons,
    service,
)
from tests.harness.polling import eventually, never

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("conflicts"), n=3) as cs:
        yield cs


async def _ns(cs: ClusterSet, ns: str) -> None:
    for i in range(len(cs.clusters)):
        await cs.ensure_namespace(i, ns)


async def wait_conflict(
    cs: ClusterSet, clusters: Sequence[int], name: str, ns: str, want: set[str] | None
) -> None:
    """Conflict=True with exactly `want` reasons on every cluster in `clusters` (None: False NoConflicts)."""

    async def check() -> bool:
        for i in clusters:
            se = await cs.get_export(i, name, ns)
            assert se is not None
            c = condition(se, ConditionType.CONFLICT)
            if want is None:
                assert cond_is(se, ConditionType.CONFLICT, "False", ConflictReason.NO_CONFLICTS), (
                    f"{cs.clusters[i].id}: {c}"
                )
            else:
                assert c is not None and c["status"] == "True", f"{cs.clusters[i].id}: {c}"
                assert reasons(se) == want, f"{cs.clusters[i].id}: reasons {reasons(se)} want {want}"
        return True

    await eventually(
        check, what=f"Conflict {want or 'NoConflicts'} on {[cs.clusters[i].id for i in clusters]}"
    )


async def test_port_conflict_set_on_every_exporting_cluster_and_cleared_when_resolved(cs: ClusterSet) -> None:
    ns = "cf-port"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]))
    await cs.wait_exported(0, "web", ns)
    await cs.export(1, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]))
    await cs.wait_aggregate("web", ns, ["c1", "c2"])
    await wait_conflict(cs, [0, 1], "web", ns, None)
    # c3 joins with a different definition of "http": every exporter is told, not only c3.
    await cs.export(2, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 8080}]))
    await wait_conflict(cs, [0, 1, 2], "web", ns, {ConflictReason.PORT})
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2", "c3"])
    assert ports_of(agg)["http"]["port"] == 80, "the oldest definition of a port name wins"
    se3 = await cs.get_export(2, "web", ns)
    assert "c3" in (condition(se3, ConditionType.CONFLICT) or {}).get("message", ""), (
        "message names the cluster"
    )
    assert cond_is(se3, ConditionType.VALID, "True")
    assert cond_is(se3, ConditionType.READY, "True"), "a conflicting export is still exported"

    async def c3_serves_no_port(want: set[str]) -> bool:
        """Traffic to http (TCP/80 as the import has it) goes only to clusters exposing TCP/80 as http:
        c3's imported slice lists no port while its Service has http on 8080 (conformance case 26)."""
        for i in range(3):
            slices = await cs.imported_slices(i, "web", ns)
            got = {c: {p.get("name") for p in s.get("ports") or []} for c, s in slices.items()}
            assert got == {"c1": {"http"}, "c2": {"http"}, "c3": want}, f"{cs.clusters[i].id}: {got}"
        return True

    await eventually(lambda: c3_serves_no_port(set()), what="c3's slice copies without the http port")
    # Resolve by fixing c3's Service: cleared everywhere, and c3 serves http again.
    await cs.put(2, service("web", ns, ports=[{"name": "http", "port": 80}]))
    await wait_conflict(cs, [0, 1, 2], "web", ns, None)
    await eventually(lambda: c3_serves_no_port({"http"}), what="c3's slice copies with the http port again")


async def test_ports_are_the_union_by_name_and_a_port_conflict(cs: ClusterSet) -> None:
    """KEP-1645 "Service Port" (conformance case 10): the union, and PortConflict on every export
    because the port sets are not identical."""
    ns = "cf-union"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]))
    await cs.wait_exported(0, "web", ns)
    await cs.export(
        1,
        "web",
        ns,
        svc=service("web", ns, ports=[{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]),
    )
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2"])

    async def union() -> bool:
        agg = await cs.broker_import("web", ns)
        assert agg is not None and {n: p["port"] for n, p in ports_of(agg).items()} == {
            "http": 80,
            "metrics": 9090,
        }
        imp = await cs.local_import(2, "web", ns)
        assert imp is not None and set(ports_of(imp)) == {"http", "metrics"}
        return True

    await eventually(union)
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.PORT})
    se1 = await cs.get_export(0, "web", ns)
    assert 'port "metrics" (TCP/9090) of cluster c2 is not in cluster c1 (oldest)' in (
        condition(se1, ConditionType.CONFLICT) or {}).get("message", "")
    assert agg is not None
    # Identical again (c2 drops metrics): the conflict clears on both, the union shrinks.
    await cs.put(1, service("web", ns, ports=[{"name": "http", "port": 80}]))
    await wait_conflict(cs, [0, 1], "web", ns, None)


async def test_oldest_export_wins_not_the_lowest_cluster_id(cs: ClusterSet) -> None:
    ns = "cf-oldest"
    await _ns(cs, ns)
    # c2 exports first, as a headless service with http on 81.
    await cs.export(
        1,
        "web",
        ns,
        svc=service("web", ns, headless=True, ports=[{"name": "http", "port": 81}]),
        endpoints=[("127.20.9.1", True, "web-0")],
    )
    await cs.wait_exported(1, "web", ns)
    await asyncio.sleep(1.1)  # creationTimestamps have second precision: make c2 strictly older
    await cs.export(0, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]))
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.TYPE, ConflictReason.PORT})
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2"])
    assert agg["spec"]["type"] == ServiceImportType.HEADLESS, "type comes from the oldest export (c2)"
    assert ports_of(agg)["http"]["port"] == 81, "port definition comes from the oldest export (c2)"
    se1 = await cs.get_export(0, "web", ns)
    assert cond_is(se1, ConditionType.VALID, "True") and cond_is(se1, ConditionType.READY, "True")
    imp = await cs.wait_import(2, "web", ns, ["c1", "c2"])
    assert imp["spec"]["type"] == ServiceImportType.HEADLESS
    # The newer, conflicting cluster leaves: cleared on the remaining exporter.
    await cs.unexport(0, "web", ns)
    await cs.wait_aggregate("web", ns, ["c2"])
    await wait_conflict(cs, [1], "web", ns, None)


async def test_session_affinity_conflicts(cs: ClusterSet) -> None:
    ns = "cf-affinity"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, session_affinity="ClientIP", timeout_seconds=100))
    await cs.wait_exported(0, "web", ns)
    await cs.export(1, "web", ns, svc=service("web", ns))  # None
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.SESSION_AFFINITY})
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2"])
    assert agg["spec"].get("sessionAffinity") == "ClientIP"
    # Same affinity, different config → SessionAffinityConfigConflict.
    await cs.put(1, service("web", ns, session_affinity="ClientIP", timeout_seconds=200))
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.SESSION_AFFINITY_CONFIG})
    agg = await cs.broker_import("web", ns)
    assert agg is not None and agg["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] == 100
    await cs.put(1, service("web", ns, session_affinity="ClientIP", timeout_seconds=100))
    await wait_conflict(cs, [0, 1], "web", ns, None)


EXPORTED_KEYS = ("tier", "a", "b", "extra", "owner")


def exported(meta: dict[str, str]) -> dict[str, str]:
    """The exported keys this test uses, among whatever else the ServiceImport carries."""
    return {k: v for k, v in meta.items() if k in EXPORTED_KEYS}


async def wait_import_metadata(
    cs: ClusterSet, name: str, ns: str, labels: dict[str, str], annotations: dict[str, str]
) -> None:
    """The ServiceImport in every cluster carries exactly these exported labels and annotations."""

    async def check() -> bool:
        for i in range(len(cs.clusters)):
            imp = await cs.local_import(i, name, ns)
            assert imp is not None, f"no ServiceImport in {cs.clusters[i].id}"
            assert exported(labels_of(imp)) == labels, f"{cs.clusters[i].id}: {labels_of(imp)}"
            assert exported(annotations_of(imp)) == annotations, f"{cs.clusters[i].id}: {annotations_of(imp)}"
        return True

    await eventually(check, what=f"exported labels {labels} and annotations {annotations} everywhere")


async def test_exported_labels_and_annotations_conflicts_share_one_condition(cs: ClusterSet) -> None:
    """KEP-1645: when the sets differ, the oldest export's whole set is used, never a per-key union."""
    ns = "cf-labels"
    await _ns(cs, ns)
    await cs.export(
        0, "web", ns, exported_labels={"tier": "web", "a": "1"}, exported_annotations={"owner": "x"}
    )
    await cs.wait_exported(0, "web", ns)
    await cs.export(
        1, "web", ns, exported_labels={"tier": "api", "b": "2"}, exported_annotations={"owner": "y"}
    )
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.LABELS, ConflictReason.ANNOTATIONS})
    se = await cs.get_export(0, "web", ns)
    assert "," in condition(se, ConditionType.CONFLICT)["reason"], "reasons are comma-joined in one condition"
    await cs.wait_aggregate("web", ns, ["c1", "c2"])
    await wait_import_metadata(cs, "web", ns, {"tier": "web", "a": "1"}, {"owner": "x"})

    # Fix only the labels: the annotations conflict stays, alone.
    await cs.patch(1, SE, "web", ns, {"spec": {"exportedLabels": {"tier": "web", "a": "1", "b": None}}})
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.ANNOTATIONS})
    # One extra key and no disagreeing value is still a different set: a conflict, key not added.
    await cs.patch(1, SE, "web", ns, {"spec": {"exportedLabels": {"extra": "1"}}})
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.LABELS, ConflictReason.ANNOTATIONS})
    await wait_import_metadata(cs, "web", ns, {"tier": "web", "a": "1"}, {"owner": "x"})
    # They agree again: cleared everywhere.
    await cs.patch(
        1, SE, "web", ns, {"spec": {"exportedLabels": {"extra": None}, "exportedAnnotations": {"owner": "x"}}}
    )
    await wait_conflict(cs, [0, 1], "web", ns, None)
    await wait_import_metadata(cs, "web", ns, {"tier": "web", "a": "1"}, {"owner": "x"})


async def test_exporter_without_exported_labels_conflicts_with_one_that_has_them(cs: ClusterSet) -> None:
    """An exporter without exportedLabels has the empty set; the oldest (empty) set is the one used."""
    ns = "cf-nolabels"
    await _ns(cs, ns)
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    await cs.export(1, "web", ns, exported_labels={"tier": "web"})
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.LABELS})
    await cs.wait_aggregate("web", ns, ["c1", "c2"])
    await wait_import_metadata(cs, "web", ns, {}, {})
    await cs.patch(1, SE, "web", ns, {"spec": {"exportedLabels": None}})
    await wait_conflict(cs, [0, 1], "web", ns, None)


async def test_headless_export_asking_for_a_vip_is_no_enablement_conflict(cs: ClusterSet) -> None:
    """A headless service has no VIP: use-clusterset-ip is not compared for it."""
    ns = "cf-headless-vip"
    await _ns(cs, ns)
    headless = service("db", ns, headless=True)
    # Headless everywhere, every exporter asking for a VIP: nothing to conflict about.
    await cs.export(0, "db", ns, svc=headless, use_clusterset_ip="true")
    await cs.wait_exported(0, "db", ns)
    await cs.export(1, "db", ns, svc=headless, use_clusterset_ip="true")
    await cs.wait_aggregate("db", ns, ["c1", "c2"])
    await wait_conflict(cs, [0, 1], "db", ns, None)
    assert ips_of(await cs.broker_import("db", ns)) == []
    # Next to an older ClusterSetIP export with a VIP, it is a type conflict, and only that.
    await cs.export(0, "web", ns, use_clusterset_ip="true")
    await cs.wait_exported(0, "web", ns)
    await cs.export(1, "web", ns, svc=service("web", ns, headless=True), use_clusterset_ip="true")
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.TYPE})
    for i in (0, 1):
        se = await cs.get_export(i, "web", ns)
        assert USE_CLUSTERSET_IP_ANNOTATION not in condition(se, ConditionType.CONFLICT)["message"]


async def test_clusterset_ip_enablement_conflict_keeps_the_export_with_the_aggregates_behaviour(
    cs: ClusterSet,
) -> None:
    ns = "cf-vip"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, use_clusterset_ip="true", endpoints=[("127.20.5.1", True, None)])
    await cs.wait_exported(0, "web", ns)
    vip = await cs.vip_of("web", ns)
    await cs.export(
        1,
        "web",
        ns,
        use_clusterset_ip="false",
        svc=service("web", ns, cluster_ip="127.10.5.2"),
        endpoints=[("127.20.5.2", True, None)],
    )
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.CLUSTERSET_IP_ENABLEMENT})
    se2 = await cs.get_export(1, "web", ns)
    assert cond_is(se2, ConditionType.VALID, "True", ValidReason.VALID), (
        "a conflicting export stays Valid=True"
    )
    await cs.wait_condition(1, "web", ns, ConditionType.READY, "True")
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2"])
    assert ips_of(agg) == [vip]
    assert annotations_of(agg)[CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION] == "c1"

    # c2 is exported with the aggregate's behaviour: pod IPs, not its ClusterIP.
    async def pod_ips() -> bool:
        s = (await cs.imported_slices(2, "web", ns)).get("c2")
        assert s is not None and addresses_of(s) == ["127.20.5.2"], s
        return True

    await eventually(pod_ips, what="c2's endpoints as pod IPs despite its 'false' setting")


async def test_changing_the_annotation_only_toggles_the_enablement_conflict_never_the_vip(
    cs: ClusterSet,
) -> None:
    ns = "cf-toggle"
    await _ns(cs, ns)
    await cs.export(0, "web", ns, use_clusterset_ip="true")
    await cs.wait_exported(0, "web", ns)
    vip = await cs.vip_of("web", ns)
    await cs.export(1, "web", ns, use_clusterset_ip="false")
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.CLUSTERSET_IP_ENABLEMENT})

    async def set_annotation(i: int, value: str | None) -> None:
        await cs.patch(i, SE, "web", ns, {"metadata": {"annotations": {USE_CLUSTERSET_IP_ANNOTATION: value}}})

    async def vip_unchanged() -> str | None:
        agg = await cs.broker_import("web", ns)
        if (
            agg is None
            or ips_of(agg) != [vip]
            or annotations_of(agg).get(USE_CLUSTERSET_IP_ANNOTATION) != "true"
        ):
            return f"aggregate changed: {agg and agg['spec']} {agg and annotations_of(agg)}"
        return None

    await set_annotation(1, "true")  # resolves it
    await wait_conflict(cs, [0, 1], "web", ns, None)
    await never(vip_unchanged, 0.5)
    await set_annotation(0, "false")  # the oldest export now differs from the aggregate's fixed setting
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.CLUSTERSET_IP_ENABLEMENT})
    await never(vip_unchanged, 1.0)
    await set_annotation(0, None)  # annotation removed: the cluster's setting (off) applies, still a conflict
    await wait_conflict(cs, [0, 1], "web", ns, {ConflictReason.CLUSTERSET_IP_ENABLEMENT})
    await set_annotation(0, "true")
    await wait_conflict(cs, [0, 1], "web", ns, None)
    await never(vip_unchanged, 0.5)

    # The other way round: an aggregate without a VIP never gets one from an annotation change.
    await cs.export(0, "novip", ns)
    await cs.wait_exported(0, "novip", ns)
    await cs.patch(0, SE, "novip", ns, {"metadata": {"annotations": {USE_CLUSTERSET_IP_ANNOTATION: "true"}}})

    async def no_vip() -> bool:
        se = await cs.get_export(0, "novip", ns)
        assert reasons(se) == {ConflictReason.CLUSTERSET_IP_ENABLEMENT}, condition(se, ConditionType.CONFLICT)
        return True

    await eventually(no_vip)

    async def got_vip() -> list[str] | None:
        agg = await cs.broker_import("novip", ns)
        return ips_of(agg) if agg else None

    await never(got_vip, 1.0, what="VIP allocated by an annotation change")


async def test_traffic_policy_and_distribution_conflicts(cs: ClusterSet) -> None:
    """InternalTrafficPolicyConflict and TrafficDistributionConflict, comma-joined in one condition on
    both exports; the oldest's values are imported."""
    ns = "cf-traffic"
    await _ns(cs, ns)
    svc = service("web", ns)
    assert svc.spec is not None
    svc.spec.internalTrafficPolicy, svc.spec.trafficDistribution = "Local", "PreferClose"
    await cs.export(0, "web", ns, svc=svc)
    await cs.wait_exported(0, "web", ns)
    await cs.export(1, "web", ns, svc=service("web", ns))
    await wait_conflict(cs, [0, 1], "web", ns,
                        {ConflictReason.INTERNAL_TRAFFIC_POLICY, ConflictReason.TRAFFIC_DISTRIBUTION})
    se2 = await cs.get_export(1, "web", ns)
    assert (condition(se2, ConditionType.CONFLICT) or {}).get("reason") == (
        "InternalTrafficPolicyConflict,TrafficDistributionConflict")
    imp = await cs.wait_import(2, "web", ns, ["c1", "c2"])
    assert (imp["spec"].get("internalTrafficPolicy"), imp["spec"].get("trafficDistribution")) == (
        "Local", "PreferClose")
