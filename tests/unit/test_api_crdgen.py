"""isthmus.api.crdgen: generated CRDs are structural, carry what kube needs, match deploy/crds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from isthmus.api import CRD_MODELS
from isthmus.api.base import CONDITION_REASON_PATTERN, CONDITION_TYPE_PATTERN, Condition, Resource
from isthmus.api.crdgen import (
    SchemaError,
    all_crds,
    crd_dir,
    crd_file_name,
    crd_for,
    is_shared,
    openapi_schema,
)
from isthmus.api.mcs import Cluster, ServiceExport, ServiceImport
from isthmus.cli.main import app

REPO = Path(__file__).resolve().parents[2]
CRDS = all_crds()

# kube's metav1.Condition schema (as controller-gen emits it), descriptions aside
KUBE_CONDITION = {
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": {"type": "string", "maxLength": 32768},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "reason": {"type": "string", "maxLength": 1024, "minLength": 1, "pattern": CONDITION_REASON_PATTERN},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "type": {"type": "string", "maxLength": 316, "pattern": CONDITION_TYPE_PATTERN},
    },
}


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("crd", CRDS, ids=lambda c: c["metadata"]["name"])
def test_schema_is_structural(crd: dict[str, Any]) -> None:
    allowed_types = {"object", "array", "string", "integer", "number", "boolean"}
    for path, node in _nodes(_schema(crd)):
        assert node.get("type") in allowed_types, f"{path}: no type"
        for banned in (
            "$ref",
            "anyOf",
            "oneOf",
            "allOf",
            "not",
            "title",
            "$defs",
            "additionalItems",
            "const",
        ):
            assert banned not in node, f"{path}: {banned}"
        if "properties" in node:
            assert "additionalProperties" not in node, path
            assert set(node.get("required", [])) <= set(node["properties"]), path
        if node["type"] == "array":
            assert "items" in node, path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert path == ".metadata" or "properties" not in node, path
        if "default" in node:
            assert not isinstance(node["default"], dict | list) or node["type"] in ("object", "array"), path
    # exclusiveMinimum/Maximum in OpenAPI 3.0 form only
    assert '"exclusiveMinimum": 0' not in str(crd)
    # nothing needs to keep unknown fields in our kinds
    assert "x-kubernetes-preserve-unknown-fields" not in yaml.safe_dump(crd)


@pytest.mark.parametrize("crd", CRDS, ids=lambda c: c["metadata"]["name"])
def test_crd_envelope(crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    names = spec["names"]
    assert crd["metadata"]["name"] == f"{names['plural']}.{spec['group']}"
    assert names["listKind"] == names["kind"] + "List"
    assert spec["scope"] == ("Cluster" if names["kind"] in ("LoadBalancerPool", "SourceIPClass", "SourceIP", "ClusterProperty") else "Namespaced")
    versions = spec["versions"]
    assert all(v["served"] for v in versions)
    assert [v["storage"] for v in versions] == [False] * (len(versions) - 1) + [True]  # storage last
    for version in versions:
        assert version["subresources"] == {"status": {}}
        assert version["schema"] == versions[-1]["schema"]  # None conversion: one schema
        assert version["additionalPrinterColumns"] == versions[-1]["additionalPrinterColumns"]
        for col in version["additionalPrinterColumns"]:
            assert col["type"] in {"string", "integer", "number", "boolean", "date"}
            assert col["jsonPath"].startswith(".")
    schema = _schema(crd)
    assert list(schema["properties"])[:3] == ["apiVersion", "kind", "metadata"]
    assert schema["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("model", [ServiceExport, ServiceImport], ids=lambda m: m.__name__)
def test_mcs_crds_serve_v1alpha1_and_store_v1beta1_as_mcs_api_v0_5(model: type[Resource]) -> None:
    crd = crd_for(model)
    assert [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]] == [
        ("v1alpha1", True, False), ("v1beta1", True, True)]
    short = {"ServiceExport": ["svcex", "svcexport"], "ServiceImport": ["svcim", "svcimport"]}
    assert crd["spec"]["names"]["shortNames"] == short[model.crd.kind]
    assert model.crd.api_version == "multicluster.x-k8s.io/v1beta1"  # what Isthmus's clients speak
    # An object written for v1alpha1 still parses: the versions differ only in name.
    old = model.from_dict({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": model.crd.kind,
                           "metadata": {"name": "web"}, **({"spec": {"type": "Headless", "ports": []}}
                                                           if model is ServiceImport else {})})
    assert old.api_version == "multicluster.x-k8s.io/v1beta1"
    with pytest.raises(ValueError, match="apiVersion"):
        model.from_dict({"apiVersion": "multicluster.x-k8s.io/v2", "kind": model.crd.kind, "metadata": {"name": "w"},
                         **({"spec": {"type": "Headless", "ports": []}} if model is ServiceImport else {})})


def test_condition_schema_is_kubes() -> None:
    for crd in CRDS:
        if crd["spec"]["names"]["kind"] == "ClusterProperty":  # about-api's has no conditions
            continue
        conditions = _schema(crd)["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        item = _strip_descriptions(conditions["items"])
        assert sorted(item["required"]) == KUBE_CONDITION["required"]
        assert {**item, "required": sorted(item["required"])} == KUBE_CONDITION
    assert openapi_schema(Condition)["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def test_service_import_crd_matches_mcs_api() -> None:
    crd = crd_for(ServiceImport)
    assert crd["metadata"]["name"] == "serviceimports.multicluster.x-k8s.io"
    schema = _schema(crd)
    assert schema["required"] == ["spec"]
    spec = schema["properties"]["spec"]
    assert sorted(spec["required"]) == ["ports", "type"]
    assert spec["properties"]["type"]["enum"] == ["ClusterSetIP", "Headless"]
    assert spec["properties"]["ports"]["x-kubernetes-list-type"] == "atomic"
    port = spec["properties"]["ports"]["items"]
    assert port["required"] == ["port"]
    assert port["properties"]["port"] == {
        "description": "The port that will be exposed by this service.",
        "type": "integer",
        "format": "int32",
        "maximum": 65535,
        "minimum": 1,
    }
    assert port["properties"]["protocol"]["enum"] == ["TCP", "UDP", "SCTP"]
    timeout = spec["properties"]["sessionAffinityConfig"]["properties"]["clientIP"]["properties"][
        "timeoutSeconds"
    ]
    assert (timeout["type"], timeout["format"], timeout["minimum"], timeout["maximum"]) == (
        "integer",
        "int32",
        1,
        86400,
    )
    clusters = schema["properties"]["status"]["properties"]["clusters"]
    assert clusters["x-kubernetes-list-map-keys"] == ["cluster"]
    cols = {c["name"]: c["jsonPath"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert cols == {"Type": ".spec.type", "IP": ".spec.ips", "Age": ".metadata.creationTimestamp"}


def test_cluster_id_pattern_and_maps() -> None:
    spec = _schema(crd_for(Cluster))["properties"]["spec"]
    assert spec["required"] == ["clusterID"]
    cid = spec["properties"]["clusterID"]
    assert (cid["pattern"], cid["maxLength"]) == ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", 63)
    assert spec["properties"]["joinedAt"] == {
        "description": "When the cluster joined.",
        "type": "string",
        "format": "date-time",
    }
    labels = _schema(crd_for(ServiceExport))["properties"]["spec"]["properties"]["exportedLabels"]
    assert labels["type"] == "object" and labels["additionalProperties"] == {"type": "string"}


def test_free_form_dict_preserves_unknown_fields_and_unions_are_rejected() -> None:
    class Free(BaseModel):
        blob: dict[str, Any]

    class Union(BaseModel):
        x: int | str

    assert openapi_schema(Free)["properties"]["blob"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    with pytest.raises(SchemaError):
        openapi_schema(Union)


def test_deploy_crds_are_up_to_date() -> None:
    """deploy/crds is generated output: regenerate with `isthmus crds --output-dir deploy/crds`."""
    for crd in CRDS:
        path = REPO / "deploy" / "crds" / crd_dir(crd) / crd_file_name(crd)
        assert yaml.safe_load(path.read_text()) == crd, f"{path} is stale"


def test_cli_prints_multi_document_yaml() -> None:
    result = CliRunner().invoke(app, ["crds"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert docs == CRDS
    assert len(docs) == len(CRD_MODELS)


def test_cli_writes_one_file_per_crd(tmp_path: Path) -> None:
    out = tmp_path / "crds"
    result = CliRunner().invoke(app, ["crds", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml"))
    assert files == sorted([f"{crd_dir(c)}/{crd_file_name(c)}" for c in CRDS]
                           + ["isthmus/kustomization.yaml", "shared/kustomization.yaml"])
    assert "shared/multicluster.x-k8s.io_serviceimports.yaml" in files
    assert "isthmus/isthmus.io_clusters.yaml" in files
    for crd in CRDS:
        assert yaml.safe_load((out / crd_dir(crd) / crd_file_name(crd)).read_text()) == crd
    for directory in ("isthmus", "shared"):
        assert (out / directory / "kustomization.yaml").read_text() == (
            REPO / "deploy" / "crds" / directory / "kustomization.yaml").read_text()


def test_cli_only_splits_ours_from_other_projects_apis() -> None:
    """Other projects' APIs (mcs-api, the About API, Karmada) apart, so an admin can apply ours alone."""
    shared = list(yaml.safe_load_all(CliRunner().invoke(app, ["crds", "--only", "shared"]).stdout))
    assert sorted(c["metadata"]["name"] for c in shared) == [
        "clusterproperties.about.k8s.io", "multiclusterservices.networking.karmada.io",
        "serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io"]
    ours = list(yaml.safe_load_all(CliRunner().invoke(app, ["crds", "--only", "isthmus"]).stdout))
    assert len(ours) + len(shared) == len(CRDS) and all(not is_shared(c) for c in ours)
    assert all(c["metadata"]["labels"] == {"app.kubernetes.io/part-of": "isthmus"} for c in ours + shared)
    bad = CliRunner().invoke(app, ["crds", "--only", "everything"])
    assert bad.exit_code == 2 and "--only must be isthmus or shared" in bad.stderr
    # --help names each shared API, so an admin knows what `--only shared` applies (and leaves out).
    help_text = " ".join(CliRunner().invoke(app, ["crds", "--help"], env={"COLUMNS": "400"}).stdout.split())
    for kind in ("ServiceExport", "ServiceImport", "About API's ClusterProperty", "Karmada's MultiClusterService"):
        assert kind in help_text, help_text


def test_cli_unwritable_output_dir_is_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(app, ["crds", "--output-dir", str(blocker / "sub")])
    assert result.exit_code == 2
    assert "error:" in result.stderr and "Traceback" not in result.output
