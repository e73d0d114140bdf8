"""Custom resources: what each served version of a CustomResourceDefinition serves, and its strategy.

As apiextensions-apiserver: the version's openAPIV3Schema (with ObjectMeta at metadata) is the
schema, its additionalPrinterColumns the table and its selectableFields the field selectors;
everything else is the generic behaviour.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from isthmus.apiserver.openapi import builtin_schemas
from isthmus.apiserver.registry.resources import ResourceInfo
from isthmus.apiserver.registry.strategy import Strategy, fields
from isthmus.apiserver.registry.table import dig

Obj = dict[str, Any]


class CustomResourceStrategy(Strategy):
    """Objects of one served CRD version.

    Conversion is kube's `None` strategy: an object written through any served version is stored
    under the CRD's storage version, and served at the version asked for, with only apiVersion
    rewritten (webhook conversion is not supported: a CRD asking for it is served the same way)."""

    def __init__(self, printer_columns: list[Obj], selectable_fields: Iterable[str],
                 api_version: str = "", storage_api_version: str = "") -> None:
        self.printer_columns = printer_columns
        self.field_selectors = fields(*sorted(selectable_fields))
        self.api_version = api_version
        self.storage_api_version = storage_api_version or api_version

    def to_storage(self, obj: Obj) -> Obj:
        if not self.storage_api_version or obj.get("apiVersion") == self.storage_api_version:
            return obj
        return {**obj, "apiVersion": self.storage_api_version}

    def from_storage(self, obj: Obj) -> Obj:
        if not self.api_version or obj.get("apiVersion") == self.api_version:
            return obj
        return {**obj, "apiVersion": self.api_version}


def crd_object_schema(version_schema: Any) -> dict[str, Any]:
    """A served version's openAPIV3Schema wrapped the way kube serves it: apiVersion, kind and
    metadata (ObjectMeta) are always allowed at the root."""
    root: dict[str, Any]
    if isinstance(version_schema, dict) and version_schema:
        root = copy.deepcopy(version_schema)
    else:
        root = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    root.setdefault("type", "object")
    props = root.setdefault("properties", {})
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    meta = copy.deepcopy(builtin_schemas.object_meta_schema())
    user_meta = props.get("metadata")
    if isinstance(user_meta, dict):  # name/generateName constraints a CRD may declare
        meta["properties"].update(user_meta.get("properties") or {})
    props["metadata"] = meta
    return root


def crd_resources(crd: dict[str, object]) -> list[ResourceInfo]:
    """One ResourceInfo per served version of a CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return []
    names = spec.get("names") or {}
    kind = str(names.get("kind") or "")
    plural = str(names.get("plural") or "")
    singular = str(names.get("singular") or kind.lower())
    group = str(spec.get("group") or "")
    storage = next((str(v.get("name") or "") for v in spec.get("versions") or []
                    if isinstance(v, dict) and v.get("storage")), "")
    out: list[ResourceInfo] = []
    for v in spec.get("versions") or []:
        if not isinstance(v, dict) or not v.get("served"):
            continue
        columns = [dict(c) for c in v.get("additionalPrinterColumns") or [] if isinstance(c, dict)]
        selectable = {
            str(f["jsonPath"]).lstrip(".")
            for f in v.get("selectableFields") or []
            if isinstance(f, dict) and isinstance(f.get("jsonPath"), str)
        }
        out.append(
            ResourceInfo(
                group=group,
                version=str(v.get("name") or ""),
                plural=plural,
                singular=singular,
                kind=kind,
                namespaced=spec.get("scope") != "Cluster",
                short_names=[str(s) for s in names.get("shortNames") or []],
                categories=[str(s) for s in names.get("categories") or []],
                has_status=isinstance(dig(v, "subresources"), dict) and "status" in v["subresources"],
                schema=crd_object_schema(dig(v, "schema", "openAPIV3Schema")),
                builtin=False,
                storage_version=bool(v.get("storage")),
                strategy=CustomResourceStrategy(columns, selectable, f"{group}/{v.get('name') or ''}",
                                                f"{group}/{storage}" if storage else ""),
            )
        )
    return out
