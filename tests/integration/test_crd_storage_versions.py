"""CRD versions on the embedded apiserver, as apiextensions-apiserver: objects stored at the storage
version whatever version wrote them, status.storedVersions appended and guarded, the API-approval
annotation of protected groups; and the upgrade in place of Isthmus's MCS CRDs from v1alpha1 alone
to v1beta1 (storage) + v1alpha1: objects rewritten, storedVersions trimmed only after the last one.
"""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace

from isthmus.api.crdgen import all_crds, crd_dir
from isthmus.clusterset.crds import ensure_crds
from isthmus.kube.helpers import install_crds, wait_established
from isthmus.kube.storagemigration import MigrationError, migrate_installed
from tests.harness.apiserver import RunningApiServer

OLD_CRDS = list(yaml.safe_load_all(
    (Path(__file__).parents[1] / "reference" / "isthmus_mcs_crds_v1alpha1.yaml").read_text()))
EXPORTS = "serviceexports.multicluster.x-k8s.io"
IMPORTS = "serviceimports.multicluster.x-k8s.io"
KEY = {EXPORTS: "multicluster.x-k8s.io/serviceexports", IMPORTS: "multicluster.x-k8s.io/serviceimports"}
SE_ALPHA = create_namespaced_resource("multicluster.x-k8s.io", "v1alpha1", "ServiceExport", "serviceexports")
SE_BETA = create_namespaced_resource("multicluster.x-k8s.io", "v1beta1", "ServiceExport", "serviceexports")
SI_ALPHA = create_namespaced_resource("multicluster.x-k8s.io", "v1alpha1", "ServiceImport", "serviceimports")
SI_BETA = create_namespaced_resource("multicluster.x-k8s.io", "v1beta1", "ServiceImport", "serviceimports")
SHARED = [c for c in all_crds() if crd_dir(c) == "shared" and c["spec"]["group"] == "multicluster.x-k8s.io"]


async def isthmus(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "isthmus", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode()


async def kubectl(server: RunningApiServer, *args: str) -> Any:
    kubectl_path = shutil.which("kubectl")
    assert kubectl_path is not None, "kubectl is needed (the Makefile's packages install it)"
    proc = await asyncio.create_subprocess_exec(kubectl_path, "--kubeconfig", server.kubeconfig, *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


def stored(server: RunningApiServer, crd: str, ns: str, name: str) -> str:
    """The apiVersion an object is persisted at (read from the apiserver's storage, not served)."""
    obj = server.store.get(KEY[crd], ns, name)
    assert obj is not None, f"{name} is not stored"
    return str(obj["apiVersion"])


async def stored_versions(client: AsyncClient, name: str) -> list[str]:
    crd = await client.get(CustomResourceDefinition, name)
    return list(crd.status.storedVersions or []) if crd.status else []


async def old_clusterset(server: RunningApiServer) -> AsyncClient:
    """An apiserver as today's Isthmus left it: the v1alpha1-only CRDs (applied by Isthmus) and objects
    at v1alpha1; then restarted, as an upgrade restarts it on the same data."""
    client = server.client()
    await asyncio.wait_for(install_crds(client, OLD_CRDS, field_manager="isthmus-up"), 30)
    await client.create(Namespace.from_dict({"metadata": {"name": "shop"}}))
    for name in ("cart", "web", "db"):
        await client.create(SE_ALPHA.from_dict({"metadata": {"name": name, "namespace": "shop"}}))
    await client.create(SI_ALPHA.from_dict({"metadata": {"name": "cart", "namespace": "shop"},
                                            "spec": {"type": "ClusterSetIP", "ports": [{"port": 80}]}}))
    assert await stored_versions(client, EXPORTS) == ["v1alpha1"]
    await server.restart()
    return server.client()


async def test_upgrade_in_place_serves_both_versions_then_migrates_and_trims(apiserver: RunningApiServer) -> None:
    client = await old_clusterset(apiserver)
    assert stored(apiserver, EXPORTS, "shop", "cart") == "multicluster.x-k8s.io/v1alpha1"

    plan = await asyncio.wait_for(ensure_crds(client, "isthmus-up"), 60)  # what up, join, deploy-broker run
    assert {EXPORTS, IMPORTS} <= {c["metadata"]["name"] for c in plan.apply}
    # Migrated right after the apply: every object at v1beta1, and only v1beta1 listed as stored.
    for name in ("cart", "web", "db"):
        assert stored(apiserver, EXPORTS, "shop", name) == "multicluster.x-k8s.io/v1beta1"
    assert stored(apiserver, IMPORTS, "shop", "cart") == "multicluster.x-k8s.io/v1beta1"
    assert await stored_versions(client, EXPORTS) == ["v1beta1"]
    assert await stored_versions(client, IMPORTS) == ["v1beta1"]
    # Readable at both versions, each answer at the version asked for.
    assert (await client.get(SE_ALPHA, "web", namespace="shop")).apiVersion == "multicluster.x-k8s.io/v1alpha1"
    assert (await client.get(SE_BETA, "web", namespace="shop")).apiVersion == "multicluster.x-k8s.io/v1beta1"
    si = await client.get(SI_ALPHA, "cart", namespace="shop")
    assert si.apiVersion == "multicluster.x-k8s.io/v1alpha1" and si.spec["ports"] == [{"port": 80, "protocol": "TCP"}]

    # As kubectl sees it: both versions discovered, v1beta1 preferred; upstream's short names.
    group = await kubectl(apiserver, "get", "--raw", "/apis/multicluster.x-k8s.io")
    assert [v["version"] for v in group["versions"]] == ["v1beta1", "v1alpha1"]
    assert group["preferredVersion"]["version"] == "v1beta1"
    for kind in ("svcexport", "svcex", "serviceexports.v1alpha1.multicluster.x-k8s.io"):
        listed = await kubectl(apiserver, "get", kind, "-n", "shop", "-o", "json")
        assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["cart", "db", "web"], kind
    assert (await kubectl(apiserver, "get", "serviceexports.v1alpha1.multicluster.x-k8s.io", "-n", "shop", "web",
                          "-o", "json"))["apiVersion"] == "multicluster.x-k8s.io/v1alpha1"
    assert [i["apiVersion"] for i in (await kubectl(apiserver, "get", "svcim", "-n", "shop", "-o", "json"))["items"]
            ] == ["multicluster.x-k8s.io/v1beta1"]

    # Idempotent: nothing more to do.
    again = await migrate_installed(client, SHARED)
    assert [(r.name, r.rewritten, r.trimmed, r.failed) for r in again] == [
        (c["metadata"]["name"], 0, [], []) for c in SHARED]


async def test_the_two_version_crd_stores_at_v1beta1_and_storedversions_wait_for_the_migration(
    apiserver: RunningApiServer,
) -> None:
    client = await old_clusterset(apiserver)
    await asyncio.wait_for(install_crds(client, SHARED, field_manager="isthmus-up"), 30)  # applied, not migrated
    # The apiserver appends the new storage version; the old one stays: objects are still stored at it.
    assert await stored_versions(client, EXPORTS) == ["v1alpha1", "v1beta1"]
    assert stored(apiserver, EXPORTS, "shop", "cart") == "multicluster.x-k8s.io/v1alpha1"
    # Old objects are served at both versions; a write through either version is stored at v1beta1.
    assert (await client.get(SE_BETA, "cart", namespace="shop")).apiVersion == "multicluster.x-k8s.io/v1beta1"
    await client.create(SE_ALPHA.from_dict({"metadata": {"name": "new", "namespace": "shop"}}))
    assert stored(apiserver, EXPORTS, "shop", "new") == "multicluster.x-k8s.io/v1beta1"
    got = await client.get(SE_ALPHA, "new", namespace="shop")
    assert got.apiVersion == "multicluster.x-k8s.io/v1alpha1"
    # A no-op update through v1alpha1 rewrites an old object at the storage version, as kube re-encodes it.
    await client.replace(await client.get(SE_ALPHA, "web", namespace="shop"))
    assert stored(apiserver, EXPORTS, "shop", "web") == "multicluster.x-k8s.io/v1beta1"

    # kube refuses to drop v1alpha1 from spec.versions while it is listed as stored.
    only_beta = copy.deepcopy(next(c for c in SHARED if c["metadata"]["name"] == EXPORTS))
    only_beta["spec"]["versions"] = [v for v in only_beta["spec"]["versions"] if v["name"] == "v1beta1"]
    with pytest.raises(ApiError) as err:
        await client.apply(CustomResourceDefinition.from_dict(only_beta), field_manager="isthmus-up", force=True)
    assert err.value.status.code == 422
    assert ('status.storedVersions[0]: Invalid value: "v1alpha1": missing from spec.versions; v1alpha1 was '
            "previously a storage version, and must remain in spec.versions until a storage migration ensures no "
            "data remains persisted in v1alpha1 and removes v1alpha1 from status.storedVersions"
            ) in (err.value.status.message or "")

    # The migration, by the command: cart and db rewritten; then the trim; then v1alpha1 may go.
    code, out = await isthmus("crds", "migrate", "--kubeconfig", apiserver.kubeconfig, "--only", "shared")
    assert code == 0, out
    assert f"{EXPORTS}: 4 rewritten at v1beta1, v1alpha1 removed from status.storedVersions" in out
    assert f"{IMPORTS}: 1 rewritten at v1beta1, v1alpha1 removed from status.storedVersions" in out
    assert stored(apiserver, EXPORTS, "shop", "db") == "multicluster.x-k8s.io/v1beta1"
    assert await stored_versions(client, EXPORTS) == ["v1beta1"]
    await client.apply(CustomResourceDefinition.from_dict(only_beta), field_manager="isthmus-up", force=True)


async def test_a_failed_rewrite_keeps_storedversions_and_exits_2(apiserver: RunningApiServer) -> None:
    client = await old_clusterset(apiserver)
    # An object the schema now rejects (written when the CRD was looser, or straight to storage):
    # its no-op update is refused, so it stays stored at v1alpha1.
    bad = copy.deepcopy(apiserver.store.get(KEY[IMPORTS], "shop", "cart"))
    bad["metadata"]["name"] = "odd"
    bad["metadata"].pop("uid", None)
    bad["spec"]["type"] = "LoadBalancer"
    apiserver.store.create(KEY[IMPORTS], bad)
    await asyncio.wait_for(install_crds(client, SHARED, field_manager="isthmus-up"), 30)

    with pytest.raises(MigrationError, match=f"{IMPORTS}: 1 rewritten at v1beta1, 1 not \\(shop/odd: "):
        await migrate_installed(client, SHARED)
    assert stored(apiserver, IMPORTS, "shop", "odd") == "multicluster.x-k8s.io/v1alpha1"
    assert await stored_versions(client, IMPORTS) == ["v1alpha1", "v1beta1"]  # not trimmed
    assert await stored_versions(client, EXPORTS) == ["v1beta1"]  # the other CRD completed
    code, out = await isthmus("crds", "migrate", "--kubeconfig", apiserver.kubeconfig)
    assert code == 2, out
    assert "storage migration incomplete, status.storedVersions kept where objects remain" in out
    assert await stored_versions(client, IMPORTS) == ["v1alpha1", "v1beta1"]

    await client.delete(SI_BETA, "odd", namespace="shop")  # fixed: the next run completes
    code, out = await isthmus("crds", "migrate", "--kubeconfig", apiserver.kubeconfig)
    assert code == 0, out
    assert await stored_versions(client, IMPORTS) == ["v1beta1"]


async def test_a_crd_another_project_installed_is_not_migrated(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    theirs = copy.deepcopy(next(c for c in SHARED if c["metadata"]["name"] == EXPORTS))
    theirs["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "cilium-operator"}
    theirs["spec"]["versions"][0]["storage"], theirs["spec"]["versions"][1]["storage"] = True, False  # alpha stores
    await client.create(CustomResourceDefinition.from_dict(theirs), field_manager="cilium-operator")
    await asyncio.wait_for(wait_established(client, EXPORTS), 30)
    await client.create(Namespace.from_dict({"metadata": {"name": "shop"}}))
    await client.create(SE_BETA.from_dict({"metadata": {"name": "cart", "namespace": "shop"}}))
    results = await migrate_installed(client, [c for c in SHARED if c["metadata"]["name"] == EXPORTS])
    assert [r.skipped for r in results] == ["installed by cilium-operator: left to it"]
    assert stored(apiserver, EXPORTS, "shop", "cart") == "multicluster.x-k8s.io/v1alpha1"


def _crd(group: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{group}", **({"annotations": annotations} if annotations else {})},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}}


async def test_protected_groups_need_the_api_approval_annotation(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    with pytest.raises(ApiError) as err:
        await client.create(CustomResourceDefinition.from_dict(_crd("demo.k8s.io")))
    assert err.value.status.code == 422
    assert ('metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval '
            'annotation "api-approved.kubernetes.io", see https://github.com/kubernetes/enhancements/pull/1111'
            ) in (err.value.status.message or "")
    with pytest.raises(ApiError) as err:
        await client.create(CustomResourceDefinition.from_dict(
            _crd("demo.kubernetes.io", {"api-approved.kubernetes.io": "yes please"})))
    assert ('metadata.annotations[api-approved.kubernetes.io]: Invalid value: "yes please": protected groups must '
            'have approval annotation "api-approved.kubernetes.io" with either a URL or a reason starting with '
            '"unapproved", see https://github.com/kubernetes/enhancements/pull/1111') in (err.value.status.message or "")
    created = await client.create(CustomResourceDefinition.from_dict(
        _crd("about.k8s.io", {"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/3084"})))
    assert created.status and created.status.storedVersions == ["v1"]
    await client.create(CustomResourceDefinition.from_dict(
        _crd("demo.k8s.io", {"api-approved.kubernetes.io": "unapproved, experimental"})))
    await client.create(CustomResourceDefinition.from_dict(_crd("demo.x-k8s.io")))  # not protected
    await client.create(CustomResourceDefinition.from_dict(_crd("k8s.io.example.com")))


async def test_every_crd_isthmus_ships_is_accepted(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    names = await asyncio.wait_for(install_crds(client), 60)
    assert len(names) == len(all_crds())
