"""OpenAPI v2/v3 documents: what kubectl looks for (fieldValidation on PATCH, gvk extensions, schemas)."""

from __future__ import annotations

import json
from typing import Any

from isthmus.apiserver.builtins import builtin_resources, crd_resources
from isthmus.apiserver.openapi.builder import definition_name, openapi_v2, openapi_v3_group, openapi_v3_index
from isthmus.apiserver.registry.resources import ResourceInfo

CRD: dict[str, Any] = {
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "port": {
                                        "x-kubernetes-int-or-string": True,
                                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                                    },
                                    "size": {"type": "integer", "nullable": True},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def _resources() -> list[ResourceInfo]:
    return builtin_resources() + crd_resources(CRD)


def _supports_field_validation(doc: dict[str, Any], group: str, version: str, kind: str) -> bool:
    """cli-runtime's queryParamVerifierV3, every PATCH for the gvk (map order is random there)."""
    found = False
    for item in doc["paths"].values():
        op = item.get("patch")
        if not op or op.get("x-kubernetes-group-version-kind") != {
            "group": group,
            "version": version,
            "kind": kind,
        }:
            continue
        names = {(p["name"], p["in"]) for p in op.get("parameters", [])}
        if ("fieldValidation", "query") not in names:
            return False
        found = True
    return found


def test_definition_names() -> None:
    by = {(r.group, r.kind): r for r in _resources()}
    assert definition_name(by[("", "Service")]) == "io.k8s.api.core.v1.Service"
    assert definition_name(by[("apps", "Deployment")]) == "io.k8s.api.apps.v1.Deployment"
    assert definition_name(by[("networking.k8s.io", "Ingress")]) == "io.k8s.api.networking.v1.Ingress"
    assert definition_name(by[("apiextensions.k8s.io", "CustomResourceDefinition")]) == (
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
    )
    assert definition_name(by[("example.com", "Widget")]) == "com.example.v1.Widget"


def test_v3_index_lists_every_group_version_with_hash() -> None:
    idx = openapi_v3_index(_resources())
    paths = idx["paths"]
    assert set(paths) == {
        "api/v1",
        *(f"apis/{g}/v1" for g in ("admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io",
                                   "apps", "authentication.k8s.io", "authorization.k8s.io", "autoscaling", "batch",
                                   "certificates.k8s.io", "coordination.k8s.io", "discovery.k8s.io",
                                   "events.k8s.io", "flowcontrol.apiserver.k8s.io", "networking.k8s.io",
                                   "node.k8s.io", "policy", "rbac.authorization.k8s.io", "scheduling.k8s.io",
                                   "storage.k8s.io")),
        "apis/autoscaling/v2",
        "apis/example.com/v1",
    }
    url = paths["api/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/api/v1?hash=") and len(url.split("=")[1]) == 128
    assert openapi_v3_index(_resources()) == idx  # stable across rebuilds


def test_v3_every_resource_declares_field_validation() -> None:
    resources = _resources()
    for r in resources:
        doc = openapi_v3_group(resources, r.group, r.version)
        assert doc is not None
        if "patch" not in r.verbs:  # create-only reviews, bindings, componentstatuses: no PATCH, as in kube
            continue
        assert _supports_field_validation(doc, r.group, r.version, r.kind), r.kind


def test_v3_document_shape() -> None:
    doc = openapi_v3_group(_resources(), "", "v1")
    assert doc is not None
    assert doc["openapi"].startswith("3.")
    svc = doc["components"]["schemas"]["io.k8s.api.core.v1.Service"]
    assert svc["x-kubernetes-group-version-kind"] == [{"group": "", "version": "v1", "kind": "Service"}]
    assert svc["properties"]["spec"] == {
        "default": {}, "description": svc["properties"]["spec"]["description"],
        "allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.ServiceSpec"}]}
    spec = doc["components"]["schemas"]["io.k8s.api.core.v1.ServiceSpec"]
    assert spec["properties"]["ports"]["x-kubernetes-patch-merge-key"] == "port"
    item = doc["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]
    assert item["patch"]["x-kubernetes-action"] == "patch"
    params = {p["name"] for p in item["patch"]["parameters"]}
    assert {"dryRun", "fieldManager", "fieldValidation", "force"} <= params
    assert "application/strategic-merge-patch+json" in item["patch"]["requestBody"]["content"]
    assert "/api/v1/namespaces/{namespace}/services/{name}/status" in doc["paths"]
    assert "/api/v1/namespaces/{namespace}/configmaps/{name}/status" not in doc["paths"]
    assert "/api/v1/namespaces/{name}" in doc["paths"]  # cluster-scoped
    ref = item["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/io.k8s.api.core.v1.Service"
    assert openapi_v3_group(_resources(), "nope.io", "v1") is None


def test_v3_crd_document() -> None:
    doc = openapi_v3_group(_resources(), "example.com", "v1")
    assert doc is not None
    widget = doc["components"]["schemas"]["com.example.v1.Widget"]
    assert widget["x-kubernetes-group-version-kind"] == [
        {"group": "example.com", "version": "v1", "kind": "Widget"}
    ]
    assert widget["properties"]["metadata"]["$ref"] == "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["components"]["schemas"]
    patch = doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]


def _walk(s: Any, fn: Any) -> None:
    if isinstance(s, dict):
        fn(s)
        for v in s.values():
            _walk(v, fn)
    elif isinstance(s, list):
        for v in s:
            _walk(v, fn)


def test_v2_is_swagger_kube_openapi_can_parse() -> None:
    doc = openapi_v2(_resources())
    assert doc["swagger"] == "2.0" and doc["info"]["version"]
    defs = doc["definitions"]
    assert defs["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "version": "v1", "kind": "Deployment"}
    ]
    problems: list[str] = []

    def check(s: dict[str, Any]) -> None:
        problems.extend(bad for bad in ("oneOf", "anyOf", "allOf", "not", "nullable") if bad in s)
        if isinstance(s.get("type"), list):
            problems.append("type list")
        if s.get("type") == "array" and not isinstance(s.get("items"), dict):
            problems.append("array without items")

    for d in defs.values():
        _walk(d, check)
    assert problems == []
    port = defs["com.example.v1.Widget"]["properties"]["spec"]["properties"]["port"]
    assert "type" not in port and "anyOf" not in port
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    assert all(
        "responses" in op for item in doc["paths"].values() for k, op in item.items() if k != "parameters"
    )
    json.dumps(doc)  # serialisable


def _refs(value: object, found: set[str]) -> set[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "$ref":
                found.add(str(v))
            else:
                _refs(v, found)
    elif isinstance(value, list):
        for v in value:
            _refs(v, found)
    return found


def test_v3_components_are_kubes_named_structs_and_every_reference_resolves() -> None:
    resources = _resources()
    for group, version in sorted({(r.group, r.version) for r in resources}):
        doc = openapi_v3_group(resources, group, version)
        assert doc is not None
        schemas = doc["components"]["schemas"]
        missing = {r for r in _refs(doc, set()) if r.removeprefix("#/components/schemas/") not in schemas}
        assert not missing, (group, version, missing)
    schemas = openapi_v3_group(resources, "apps", "v1")["components"]["schemas"]  # type: ignore[index]
    spec = schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]
    assert spec["strategy"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentStrategy"}]
    assert spec["template"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"}]
    surge = schemas["io.k8s.api.apps.v1.RollingUpdateDeployment"]["properties"]["maxSurge"]
    assert surge["$ref"] == "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"  # no default: bare
    assert schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["oneOf"] == [{"type": "integer"},
                                                                                 {"type": "string"}]
    meta = schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]
    assert meta["creationTimestamp"]["$ref"] == "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Time"
    # extensions beside a reference wrap it in allOf (kube-openapi's wrapRefs)
    assert meta["ownerReferences"]["items"] == {
        "default": {}, "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"}]}
    pod = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert pod["x-kubernetes-list-map-keys"] == ["name"] and pod["items"]["allOf"][0]["$ref"].endswith(".Container")
    lst = schemas["io.k8s.api.apps.v1.DeploymentList"]["properties"]
    assert lst["metadata"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}]


def test_v3_core_document_has_the_pod_create_subresources() -> None:
    doc = openapi_v3_group(_resources(), "", "v1")
    assert doc is not None
    post = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"]
    assert post["operationId"] == "createCoreV1NamespacedPodEviction"
    assert post["x-kubernetes-group-version-kind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert post["requestBody"]["content"]["*/*"]["schema"]["$ref"] == "#/components/schemas/io.k8s.api.policy.v1.Eviction"
    assert "deleteOptions" in doc["components"]["schemas"]["io.k8s.api.policy.v1.Eviction"]["properties"]
    binding = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/binding"]["post"]
    assert binding["operationId"] == "createCoreV1NamespacedPodBinding"


def test_v2_definitions_reference_kubes_named_structs() -> None:
    doc = openapi_v2(_resources())
    defs = doc["definitions"]
    missing = {r for r in _refs(doc, set()) if r.removeprefix("#/definitions/") not in defs}
    assert not missing
    assert defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"] == "int-or-string"
    strategy = defs["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"]
    assert strategy["$ref"] == "#/definitions/io.k8s.api.apps.v1.DeploymentStrategy" and "allOf" not in strategy
    assert not any("oneOf" in d or "allOf" in d for d in defs.values())
