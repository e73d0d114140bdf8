"""CRD manifests from the pydantic models: pydantic's JSON schema rewritten into kube's structural
OpenAPI v3 dialect.

Structural (what apiextensions requires): every node has a `type`, no `$ref`/`anyOf`/`allOf`
combinators for typing, no `title`; `Optional` becomes an absent field (we never send null).
Pydantic's 2020-12 numeric `exclusiveMinimum` becomes OpenAPI 3.0's boolean form; `const` an enum.
Free-form objects (`dict[str, Any]`) get `x-kubernetes-preserve-unknown-fields`, the only place it
is needed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from pydantic import BaseModel

from isthmus.api.base import Resource

# Keys copied through unchanged from pydantic's schema (everything else kube does not know is dropped).
_KEEP = {
    "type",
    "format",
    "description",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "default",
    "required",
    "nullable",
}

_API_VERSION_DESC = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values."
)
_KIND_DESC = "Kind is a string value representing the REST resource this object represents. In CamelCase."


class SchemaError(ValueError):
    """The model cannot be expressed as a structural schema (a bug in a model definition)."""


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Inline `$ref` and collapse Optional (`anyOf [X, null]`) and single `allOf`; sibling keys
    (description, extensions) win over the referenced definition's."""
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**_resolve(target, defs), **node}
    for key in ("anyOf", "oneOf"):
        if key in node:
            branches = [b for b in node.pop(key) if b.get("type") != "null"]
            if len(branches) != 1:
                raise SchemaError(f"unions are not structural: {branches}")
            node = {**_resolve(branches[0], defs), **node}
    if "allOf" in node:
        branches = node.pop("allOf")
        if len(branches) != 1:
            raise SchemaError(f"allOf is not structural: {branches}")
        node = {**_resolve(branches[0], defs), **node}
    if node.get("default", 0) is None:
        del node["default"]
    return node


def _kube(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> dict[str, Any]:
    src = _resolve(node, defs)
    out: dict[str, Any] = {k: v for k, v in src.items() if k in _KEEP or k.startswith("x-kubernetes-")}
    if "const" in src:
        out["enum"] = [src["const"]]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(src.get(bound), int | float) and not isinstance(src.get(bound), bool):
            out[plain] = src[bound]
            out[bound] = True
    if "enum" in out and "type" not in out:
        kinds = {type(v) for v in out["enum"]}
        out["type"] = (
            {str: "string", int: "integer", bool: "boolean"}.get(kinds.pop()) if len(kinds) == 1 else None
        )

    typ = out.get("type")
    if typ == "object":
        props = src.get("properties")
        extra = src.get("additionalProperties")
        if props:
            out["properties"] = {k: _kube(v, defs, f"{path}.{k}") for k, v in props.items()}
            required = [r for r in src.get("required", []) if r in props]
            if required:
                out["required"] = required
                for r in required:  # a default on a required field would hide a missing value
                    out["properties"][r].pop("default", None)
            else:
                out.pop("required", None)
        elif isinstance(extra, Mapping) and extra:
            out["additionalProperties"] = _kube(extra, defs, f"{path}[*]")
        else:  # dict[str, Any] or an empty model: anything goes, and kube must keep it
            out["x-kubernetes-preserve-unknown-fields"] = True
        if props and extra not in (None, False):
            raise SchemaError(f"{path}: properties and additionalProperties together are not structural")
    elif typ == "array":
        out["items"] = _kube(src.get("items", {}), defs, f"{path}[]")
    elif typ not in ("string", "integer", "number", "boolean"):
        if not out.get("x-kubernetes-preserve-unknown-fields") and not out.get("x-kubernetes-int-or-string"):
            raise SchemaError(f"{path}: no structural type in {dict(src)}")
    # description and type first, for people reading the generated YAML
    return {k: out[k] for k in ("description", "type") if k in out} | {
        k: v for k, v in out.items() if k not in ("description", "type")
    }


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a model (aliases as property names, refs inlined)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _kube(raw, raw.get("$defs", {}), model.__name__)


def resource_schema(model: type[Resource]) -> dict[str, Any]:
    """openAPIV3Schema of a top-level resource: apiVersion/kind/metadata as kube wants them."""
    schema = openapi_schema(model)
    props = schema["properties"]
    props["apiVersion"] = {"description": _API_VERSION_DESC, "type": "string"}
    props["kind"] = {"description": _KIND_DESC, "type": "string"}
    props["metadata"] = {"type": "object"}  # kube owns metadata's schema
    required = [r for r in schema.get("required", []) if r not in ("apiVersion", "kind", "metadata")]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    # apiVersion, kind, metadata first, as controller-gen orders them
    schema["properties"] = {k: props[k] for k in ("apiVersion", "kind", "metadata")} | {
        k: v for k, v in props.items() if k not in ("apiVersion", "kind", "metadata")
    }
    return schema


PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF = "isthmus"
SHARED_GROUPS = frozenset({"multicluster.x-k8s.io", "networking.karmada.io", "about.k8s.io"})
"""API groups other projects define and ship too (Submariner, Cilium's and GKE's MCS, Karmada, about-api)."""
SHARED_DIR = "shared"
OWN_DIR = "isthmus"


def crd_for(model: type[Resource]) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition of a resource model."""
    info = model.crd
    names: dict[str, Any] = {
        "kind": info.kind,
        "listKind": f"{info.kind}List",
        "plural": info.plural,
        "singular": info.singular_name,
    }
    if info.short_names:
        names["shortNames"] = list(info.short_names)
    if info.categories:
        names["categories"] = list(info.categories)
    schema = resource_schema(model)
    versions = []
    # Older versions first, as controller-gen orders them; each its own copy, so editing one
    # manifest's version never changes another's.
    for name in info.versions:
        version: dict[str, Any] = {
            "name": name,
            "served": True,
            "storage": name == info.version,
            "schema": {"openAPIV3Schema": copy.deepcopy(schema)},
        }
        if info.status_subresource:
            version["subresources"] = {"status": {}}
        if info.printer_columns:
            version["additionalPrinterColumns"] = [c.to_dict() for c in info.printer_columns]
        versions.append(version)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # The label tells `isthmus join` and `diagnose` a shared CRD is ours to upgrade, whoever applied it
        # (kubectl's field manager says nothing about where the manifest came from).
        "metadata": {"name": info.crd_name, "labels": {PART_OF_LABEL: PART_OF}}
        | ({"annotations": dict(info.annotations)} if info.annotations else {}),
        "spec": {"group": info.group, "names": names, "scope": info.scope, "versions": versions},
    }


def all_crds(models: Iterable[type[Resource]] | None = None) -> list[dict[str, Any]]:
    """CRDs of the given models (default: the whole registry, `isthmus.api.CRD_MODELS`)."""
    if models is None:
        from isthmus.api import CRD_MODELS  # late: the registry imports every capability's module

        models = CRD_MODELS
    return [crd_for(m) for m in models]


def storage_version(crd: Mapping[str, Any]) -> Mapping[str, Any]:
    """The version entry of a CRD manifest objects are stored in (the one Isthmus speaks)."""
    versions = crd["spec"]["versions"]
    return next((v for v in versions if v.get("storage")), versions[-1])


def crd_file_name(crd: Mapping[str, Any]) -> str:
    """`<group>_<plural>.yaml`, controller-gen's naming."""
    return f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"


def is_shared(crd: Mapping[str, Any]) -> bool:
    """Whether the CRD defines another project's API (mcs-api's, Karmada's) that other installs may
    already have defined: such CRDs are installed only where absent and never deleted by us."""
    return str(crd["spec"]["group"]) in SHARED_GROUPS


def crd_dir(crd: Mapping[str, Any]) -> str:
    """The kustomization under deploy/crds a CRD belongs to: shared ones apart, so deleting ours
    (`kubectl delete -k deploy/crds/isthmus`) never deletes another project's kinds."""
    return SHARED_DIR if is_shared(crd) else OWN_DIR


def kustomization(directory: str, crds: Iterable[Mapping[str, Any]]) -> str:
    """deploy/crds/<directory>/kustomization.yaml, generated with the files it lists."""
    files = sorted(crd_file_name(c) for c in crds if crd_dir(c) == directory)
    head = _KUSTOMIZATION_HEADS[directory]
    return head + yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                  "resources": files}, sort_keys=False)


_KUSTOMIZATION_HEADS = {
    SHARED_DIR: (
        "# Generated by `isthmus crds --output-dir deploy/crds`: do not edit.\n"
        "# Other projects' APIs Isthmus speaks (mcs-api's ServiceExport/ServiceImport, Karmada's\n"
        "# MultiClusterService, about-api's ClusterProperty). Apply only where they are absent\n"
        "# (`isthmus join` and `deploy-broker` check that themselves; `isthmus diagnose` says who\n"
        "# installed them and whether they fit):\n"
        "#   kubectl apply --server-side -k deploy/crds/shared\n"
        "# Never `kubectl delete -k` this directory: every object of these kinds, other projects' too, goes.\n"
    ),
    OWN_DIR: (
        "# Generated by `isthmus crds --output-dir deploy/crds`: do not edit.\n"
        "# Isthmus's own APIs. Kept when Isthmus is uninstalled; `kubectl delete -k deploy/crds/isthmus`\n"
        "# deletes them with every Cluster, ExportedService, pool, gateway and claim (docs/deploy.md).\n"
    ),
}


def to_yaml(docs: Iterable[Mapping[str, Any]]) -> str:
    """Multi-document YAML, keys in declaration order."""
    return yaml.safe_dump_all([dict(d) for d in docs], sort_keys=False, explicit_start=True, width=120)
