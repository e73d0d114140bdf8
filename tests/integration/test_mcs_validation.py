"""ServiceExport validation and the Valid / Ready conditions (docs/discovery.md "ServiceExport conditions")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from lightkube.resources.core_v1 import Event, Service

from isthmus.api.mcs import (
    CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION,
    USE_CLUSTERSET_IP_ANNOTATION,
    ConditionType,
    ReadyReason,
    ServiceImportType,
    ValidReason,
)
from tests.harness.clusterset import (
    INVALID_ANNOTATION,
    SE,
    ClusterSet,
    annotations_of,
    clusters_of,
    cond_is,
    condition,
    endpoint_slice,
    ips_of,
    list_dicts,
    service,
    service_export,
)
from tests.harness.polling import eventually, never

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("validation"), n=2) as cs:
        yield cs


async def _nothing_published(cs: ClusterSet, name: str, ns: str) -> None:
    assert await cs.exported_services(name, ns) == []
    assert await cs.broker_import(name, ns) is None
    assert await cs.broker_slices(name, ns) == []


async def test_no_service_is_valid_false_no_service(cs: ClusterSet) -> None:
    ns = "v-nosvc"
    await cs.ensure_namespace(0, ns)
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "ghost", ns, create_export=False, endpoints=None, svc=service("other", ns))
    await cs.put(0, service_export("ghost", ns))
    se = await cs.wait_condition(0, "ghost", ns, ConditionType.VALID, "False", ValidReason.NO_SERVICE)
    assert not cond_is(se, ConditionType.READY, "True")
    await never(lambda: cs.local_import(1, "ghost", ns), 1.0, what="import of an invalid export")
    await _nothing_published(cs, "ghost", ns)

    # The Service appears later: the same export becomes valid and is exported.
    await cs.put(0, service("ghost", ns))
    await cs.wait_condition(0, "ghost", ns, ConditionType.VALID, "True", ValidReason.VALID)
    await cs.wait_exported(0, "ghost", ns)
    await cs.wait_import(1, "ghost", ns, ["c1"])


async def test_external_name_is_invalid_service_type(cs: ClusterSet) -> None:
    ns = "v-extname"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "ext", ns, svc=service("ext", ns, type="ExternalName"), endpoints=None)
    se = await cs.wait_condition(0, "ext", ns, ConditionType.VALID, "False", ValidReason.INVALID_SERVICE_TYPE)
    assert not cond_is(se, ConditionType.READY, "True")
    await never(lambda: cs.local_import(1, "ext", ns), 1.0, what="import of an ExternalName export")
    await _nothing_published(cs, "ext", ns)


async def test_malformed_use_clusterset_ip_is_invalid_annotation_and_nothing_published(
    cs: ClusterSet,
) -> None:
    ns = "v-badann"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "bad", ns, use_clusterset_ip="garbage")
    se = await cs.wait_condition(0, "bad", ns, ConditionType.VALID, "False", INVALID_ANNOTATION)
    assert "garbage" in (condition(se, ConditionType.VALID) or {}).get("message", ""), (
        "message should quote the value"
    )
    assert not cond_is(se, ConditionType.READY, "True")
    await never(lambda: cs.local_import(1, "bad", ns), 1.0, what="import of an export with a bad annotation")
    await _nothing_published(cs, "bad", ns)

    async def warning_event() -> bool:
        events = await list_dicts(cs.c(0), Event, ns)
        return any(
            e.get("type") == "Warning"
            and e.get("reason") == INVALID_ANNOTATION
            and (e.get("involvedObject") or {}).get("name") == "bad"
            for e in events
        )

    await eventually(warning_event, what="Warning Event InvalidAnnotation")


async def test_malformed_annotation_later_keeps_what_was_published(cs: ClusterSet) -> None:
    ns = "v-badlater"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "web", ns, use_clusterset_ip="true")
    await cs.wait_exported(0, "web", ns)
    vip = await cs.vip_of("web", ns)
    before = await cs.wait_import(1, "web", ns, ["c1"])

    await cs.patch(
        0, SE, "web", ns, {"metadata": {"annotations": {USE_CLUSTERSET_IP_ANNOTATION: "yes please"}}}
    )
    await cs.wait_condition(0, "web", ns, ConditionType.VALID, "False", INVALID_ANNOTATION)

    async def changed() -> str | None:
        agg = await cs.broker_import("web", ns)
        imp = await cs.local_import(1, "web", ns)
        if agg is None or imp is None:
            return "deleted"
        if ips_of(agg) != [vip] or clusters_of(agg) != ["c1"] or ips_of(imp) != [vip]:
            return f"changed: {ips_of(agg)} {clusters_of(agg)} {ips_of(imp)}"
        if (
            len(await cs.exported_services("web", ns)) != 1
            or len(await cs.imported_slices(1, "web", ns)) != 1
        ):
            return "published objects removed"
        return None

    await never(changed, 2.0, what="published state changed by a malformed annotation")
    assert ips_of(before) == [vip]

    await cs.patch(0, SE, "web", ns, {"metadata": {"annotations": {USE_CLUSTERSET_IP_ANNOTATION: "true"}}})
    await cs.wait_condition(0, "web", ns, ConditionType.VALID, "True", ValidReason.VALID)
    await cs.wait_condition(0, "web", ns, ConditionType.READY, "True")
    assert await cs.vip_of("web", ns) == vip


@pytest.mark.parametrize("svc_type", ["ClusterIP", "NodePort", "LoadBalancer"])
async def test_clusterip_nodeport_loadbalancer_export_as_clusterset_ip(cs: ClusterSet, svc_type: str) -> None:
    ns = f"v-type-{svc_type.lower()}"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "svc", ns, svc=service("svc", ns, type=svc_type))
    se = await cs.wait_condition(0, "svc", ns, ConditionType.VALID, "True", ValidReason.VALID)
    assert condition(se, ConditionType.VALID) is not None
    agg = await cs.wait_exported(0, "svc", ns)
    assert agg["spec"]["type"] == ServiceImportType.CLUSTER_SET_IP
    imp = await cs.wait_import(1, "svc", ns, ["c1"])
    assert imp["spec"]["type"] == ServiceImportType.CLUSTER_SET_IP
    assert {p["port"] for p in imp["spec"]["ports"]} == {80}


async def test_headless_exports_as_headless(cs: ClusterSet) -> None:
    ns = "v-headless"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "db", ns, svc=service("db", ns, headless=True), use_clusterset_ip="true")
    await cs.wait_condition(0, "db", ns, ConditionType.VALID, "True", ValidReason.VALID)
    agg = await cs.wait_exported(0, "db", ns)
    assert agg["spec"]["type"] == ServiceImportType.HEADLESS
    imp = await cs.wait_import(1, "db", ns, ["c1"])
    assert imp["spec"]["type"] == ServiceImportType.HEADLESS
    # A headless service has no ClusterSet IP, whatever the VIP setting (KEP: Headless imports have no IPs).
    assert ips_of(agg) == [] and ips_of(imp) == []
    assert CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION not in annotations_of(agg)
    # A sole exporter cannot conflict with itself.
    se = await cs.get_export(0, "db", ns)
    assert cond_is(se, ConditionType.CONFLICT, "False", "NoConflicts"), condition(se, ConditionType.CONFLICT)


async def test_ready_true_exported_once_in_aggregate(cs: ClusterSet) -> None:
    ns = "v-ready"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "api", ns)
    se = await cs.wait_condition(0, "api", ns, ConditionType.READY, "True")
    assert condition(se, ConditionType.READY)["reason"] in (ReadyReason.EXPORTED, ReadyReason.READY)
    assert cond_is(se, ConditionType.CONFLICT, "False", "NoConflicts")
    agg = await cs.broker_import("api", ns)
    assert agg is not None and "c1" in clusters_of(agg)


async def test_ready_condition_works_with_kubectl_wait(cs: ClusterSet, tmp_path: Path) -> None:
    ns = "v-kubectl"
    await cs.ensure_namespace(0, ns)
    await cs.put(0, service("kw", ns))
    await cs.put(0, endpoint_slice("kw", ns))
    # Start waiting before the export exists (kubectl wait retries NotFound only with --for=create in
    # newer versions), so create first, then wait: the condition is not there yet at that moment.
    await cs.put(0, service_export("kw", ns))
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        cs.clusters[0].server.kubeconfig,
        "--cache-dir",
        str(tmp_path / "kubecache"),
        "-n",
        ns,
        "wait",
        "--for=condition=Ready",
        "serviceexport/kw",
        "--timeout=20s",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, f"kubectl wait failed: {out.decode()} {err.decode()}"
    assert "condition met" in out.decode()

    # And the inverse: an invalid export never becomes Ready within the timeout.
    await cs.put(0, service_export("kw-missing", ns))
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        cs.clusters[0].server.kubeconfig,
        "--cache-dir",
        str(tmp_path / "kubecache"),
        "-n",
        ns,
        "wait",
        "--for=condition=Ready",
        "serviceexport/kw-missing",
        "--timeout=2s",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode != 0


async def test_service_deleted_gives_no_service_and_withdraws(cs: ClusterSet) -> None:
    ns = "v-svcdel"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "gone", ns)
    await cs.wait_exported(0, "gone", ns)
    await cs.wait_import(1, "gone", ns)
    await cs.delete(0, Service, "gone", ns)
    await cs.wait_condition(0, "gone", ns, ConditionType.VALID, "False", ValidReason.NO_SERVICE)

    async def withdrawn() -> bool:
        return (
            await cs.broker_import("gone", ns) is None
            and await cs.exported_services("gone", ns) == []
            and await cs.broker_slices("gone", ns) == []
            and await cs.local_import(1, "gone", ns) is None
            and await cs.imported_slices(1, "gone", ns) == {}
        )

    await eventually(withdrawn, what="everything withdrawn after the Service was deleted")


async def test_conditions_carry_the_observed_generation(cs: ClusterSet) -> None:
    ns = "v-generation"
    await cs.ensure_namespace(1, ns)
    await cs.export(0, "gen", ns)
    await cs.wait_exported(0, "gen", ns)
    await cs.patch(0, SE, "gen", ns, {"spec": {"exportedLabels": {"a": "b"}}})

    async def observed() -> bool:
        se = await cs.get_export(0, "gen", ns)
        assert se is not None
        gen = se["metadata"]["generation"]
        assert gen >= 2
        for t in (ConditionType.VALID, ConditionType.READY, ConditionType.CONFLICT):
            c = condition(se, t)
            assert c is not None and c.get("observedGeneration") == gen, f"{t}: {c} (generation {gen})"
        return True

    await eventually(observed)
