"""The v1.32 discovery reference data (src/isthmus/apiserver/data/discovery-v1.32.json) and the
`kubectl api-resources` reference output derived from it (tests/reference/)."""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.reference.fake_discovery import (
    REFERENCE_API_RESOURCES,
    kubectl_minor_version,
    load_discovery,
    preferred_resources,
    render_api_resources,
    run_kubectl_api_resources,
    serve,
)

VERBS = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

# Resources whose etcd storage version is not <their group>/v1 (kube's storageversionhashdata).
STORED_AS = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): ("apiextensions.k8s.io", "v1beta1"),
    ("autoscaling", "horizontalpodautoscalers"): ("autoscaling", "v2"),
    ("events.k8s.io", "events"): ("", "v1"),
}


@pytest.fixture(scope="module")
def discovery() -> dict[str, Any]:
    return load_discovery()


def _lists(discovery: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """groupVersion -> APIResourceList, for every group/version /api and /apis advertise."""
    docs = discovery["documents"]
    out = {v: docs[f"/api/{v}"] for v in docs["/api"]["versions"]}
    for g in docs["/apis"]["groups"]:
        for v in g["versions"]:
            out[v["groupVersion"]] = docs[f"/apis/{v['groupVersion']}"]
    return out


def test_packaged_copy_is_the_reference(discovery: dict[str, Any]) -> None:
    packaged = importlib.resources.files("isthmus.apiserver.data").joinpath("discovery-v1.32.json")
    assert json.loads(packaged.read_text(encoding="utf-8")) == discovery
    assert discovery["kubernetesVersion"] == "v1.32"


def test_every_advertised_document_exists_and_nothing_else(discovery: dict[str, Any]) -> None:
    docs = discovery["documents"]
    assert docs["/api"]["kind"] == "APIVersions" and docs["/api"]["versions"] == ["v1"]
    apis = docs["/apis"]
    assert apis["kind"] == "APIGroupList" and apis["apiVersion"] == "v1"
    expected = {"/api", "/api/v1", "/apis"}
    names = [g["name"] for g in apis["groups"]]
    assert len(names) == len(set(names))
    for g in apis["groups"]:
        versions = [v["version"] for v in g["versions"]]
        assert versions and len(versions) == len(set(versions))
        for v in g["versions"]:
            assert v["groupVersion"] == f"{g['name']}/{v['version']}"
        # the preferred version is served, and listed first as kube does
        assert g["preferredVersion"] in g["versions"]
        assert g["preferredVersion"] == g["versions"][0]
        group_doc = docs[f"/apis/{g['name']}"]
        assert group_doc == {"apiVersion": "v1", "kind": "APIGroup", **g}
        expected.add(f"/apis/{g['name']}")
        expected.update(f"/apis/{v['groupVersion']}" for v in g["versions"])
    assert set(docs) == expected


def test_only_default_enabled_versions(discovery: dict[str, Any]) -> None:
    served = set(_lists(discovery))
    assert not [gv for gv in served if "alpha" in gv or "beta" in gv]
    assert "resource.k8s.io/v1beta1" not in served
    assert not [gv for gv in served if gv.startswith(("resource.k8s.io/", "storagemigration.k8s.io/"))]
    assert len(served) == 21


def test_resource_lists_are_well_formed(discovery: dict[str, Any]) -> None:
    for gv, lst in _lists(discovery).items():
        assert lst["kind"] == "APIResourceList"
        assert lst["groupVersion"] == gv
        # kube's legacy /api/v1 list carries no apiVersion; the /apis ones do
        assert lst.get("apiVersion") == (None if gv == "v1" else "v1")
        names = [r["name"] for r in lst["resources"]]
        assert names == sorted(names) and len(names) == len(set(names))
        top = {r["name"]: r for r in lst["resources"] if "/" not in r["name"]}
        for r in lst["resources"]:
            assert isinstance(r["name"], str) and r["name"]
            assert isinstance(r["kind"], str) and r["kind"]
            assert isinstance(r["namespaced"], bool)
            assert isinstance(r["singularName"], str)
            assert r["verbs"] and set(r["verbs"]) <= VERBS and r["verbs"] == sorted(r["verbs"])
            assert ("group" in r) == ("version" in r)
            if "/" in r["name"]:
                parent = top[r["name"].split("/")[0]]
                assert r["singularName"] == ""
                assert r["namespaced"] == parent["namespaced"]
                assert "storageVersionHash" not in r and "shortNames" not in r and "categories" not in r
            else:
                assert r["singularName"]


def test_storage_version_hashes(discovery: dict[str, Any]) -> None:
    def svh(group: str, version: str, kind: str) -> str:
        return base64.b64encode(hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()[:8]).decode()

    hashed = 0
    for gv, lst in _lists(discovery).items():
        group = gv.rpartition("/")[0]
        for r in lst["resources"]:
            if "storageVersionHash" in r:
                sg, sv = STORED_AS.get((group, r["name"]), (group, "v1"))
                assert r["storageVersionHash"] == svh(sg, sv, r["kind"]), (gv, r["name"])
                hashed += 1
    assert hashed == 51


def test_known_v1_32_details(discovery: dict[str, Any]) -> None:
    by = {(gv, r["name"]): r for gv, lst in _lists(discovery).items() for r in lst["resources"]}
    assert ("v1", "pods/resize") not in by  # 1.33
    assert ("networking.k8s.io/v1", "servicecidrs") not in by  # GA in 1.33
    assert ("storage.k8s.io/v1", "volumeattributesclasses") not in by  # GA in 1.34
    assert ("admissionregistration.k8s.io/v1", "mutatingadmissionpolicies") not in by
    scale = by[("apps/v1", "deployments/scale")]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    token = by[("v1", "serviceaccounts/token")]
    assert (token["group"], token["version"], token["kind"]) == (
        "authentication.k8s.io",
        "v1",
        "TokenRequest",
    )
    eviction = by[("v1", "pods/eviction")]
    assert (eviction["group"], eviction["version"], eviction["kind"]) == ("policy", "v1", "Eviction")
    assert by[("v1", "pods/log")]["verbs"] == ["get"]
    assert by[("v1", "pods")]["shortNames"] == ["po"] and by[("v1", "pods")]["categories"] == ["all"]
    assert by[("apiextensions.k8s.io/v1", "customresourcedefinitions")]["shortNames"] == ["crd", "crds"]
    assert by[("v1", "namespaces")]["verbs"] == [
        "create",
        "delete",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
    assert by[("v1", "componentstatuses")]["verbs"] == ["get", "list"]


def test_api_resources_reference_matches_documents(discovery: dict[str, Any]) -> None:
    reference = REFERENCE_API_RESOURCES.read_text(encoding="utf-8")
    assert render_api_resources(discovery) == reference
    assert len(reference.splitlines()) == 1 + len(preferred_resources(discovery)) == 59


def test_kubectl_api_resources_against_fake_server(discovery: dict[str, Any], tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    if kubectl_minor_version(kubectl) != "1.32":
        pytest.skip("the reference output is that of a v1.32 kubectl")
    with serve(discovery) as url:
        out = run_kubectl_api_resources(kubectl, url, tmp_path)
    assert out == REFERENCE_API_RESOURCES.read_text(encoding="utf-8")
