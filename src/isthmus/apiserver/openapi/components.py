"""OpenAPI v3 `components.schemas` of the built-in kinds as kube-apiserver v1.32 publishes them.

Every Go struct is a component named after its package and type (io.k8s.api.apps.v1.DeploymentSpec,
io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta, ...) and fields reference it with `$ref`. As
kube-openapi's builder3 (wrapRefs), a reference with a default, `nullable` or an `x-kubernetes-*`
extension beside it is wrapped in a one-element `allOf` (OpenAPI 3.0 ignores a `$ref`'s siblings);
one with only a description keeps it beside the `$ref`. The scalar wrappers are components too:
Time and MicroTime (date-time strings), IntOrString (`oneOf` integer/string, format int-or-string)
and Quantity (`oneOf` string/number), which is what `kubectl explain` prints as `<IntOrString>` or
`<Quantity>`.

The structs and their extensions come from the same lightkube models and overlays as the inline
schemas the server validates with (builtin_schemas.py): the document and the validation describe
one shape. Defaults follow kube's rule for Go value types as far as the models tell it: a root's
metadata/spec/status, required struct fields and struct items default to {}.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec.inspect as mi

from isthmus.apiserver.openapi import builtin_schemas as bs

Schema = dict[str, Any]

REF = "#/components/schemas/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
TIME, MICRO_TIME = META + "Time", META + "MicroTime"
OBJECT_META, LIST_META = META + "ObjectMeta", META + "ListMeta"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
FIELDS_V1, RAW_EXTENSION = META + "FieldsV1", "io.k8s.apimachinery.pkg.runtime.RawExtension"

# kube's descriptions of the scalar wrappers (their Go doc comments).
SCALARS: dict[str, Schema] = {
    TIME: {"description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON.  "
                          "Wrappers are provided for many of the factory methods that the time package offers.",
           "type": "string", "format": "date-time"},
    MICRO_TIME: {"description": "MicroTime is version of Time with microsecond level precision.",
                 "type": "string", "format": "date-time"},
    INT_OR_STRING: {"description": "IntOrString is a type that can hold an int32 or a string.  When used in JSON or "
                                   "YAML marshalling and unmarshalling, it produces or consumes the inner type.  This "
                                   "allows you to have, for example, a JSON field that can accept a name or number.",
                    "format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
    QUANTITY: {"description": "Quantity is a fixed-point representation of a number. It provides convenient "
                              "marshaling/unmarshaling in JSON and YAML, in addition to String() and AsInt64() "
                              "accessors.",
               "oneOf": [{"type": "string"}, {"type": "number"}]},
    FIELDS_V1: {"description": "FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format.",
                "type": "object"},
    RAW_EXTENSION: {"description": "RawExtension is used to hold extensions in external versions.", "type": "object"},
}

# Maps whose values are a scalar wrapper (lightkube types every map as a bare dict).
_MAPS_OF: dict[tuple[str, str], str] = {("PodDisruptionBudgetStatus", "disruptedPods"): TIME}

_SPECIAL_PACKAGES = {
    "meta_v1": "io.k8s.apimachinery.pkg.apis.meta.v1",
    "apiextensions_v1": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1",
    "apiregistration_v1": "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1",
}


def component_name(cls: type) -> str:
    """kube's definition name of a model class: its Go package, then the type."""
    module = cls.__module__.rsplit(".", 1)[-1]
    package = _SPECIAL_PACKAGES.get(module) or "io.k8s.api." + module.replace("_", ".")
    return f"{package}.{cls.__name__}"


def ref(name: str, siblings: Schema | None = None) -> Schema:
    """A reference to a component with its siblings, wrapped as kube-openapi's wrapRefs does."""
    siblings = siblings or {}
    if "default" in siblings or "nullable" in siblings or any(k.startswith("x-") for k in siblings):
        return {**siblings, "allOf": [{"$ref": REF + name}]}
    return {"$ref": REF + name, **siblings}


def _named(annotation: str) -> str | None:
    """The scalar wrapper a field's model annotation names, if any."""
    if "MicroTime" in annotation:
        return MICRO_TIME
    if "IntOrString" in annotation:
        return INT_OR_STRING
    if "Quantity" in annotation:
        return QUANTITY
    if "FieldsV1" in annotation:
        return FIELDS_V1
    if "RawExtension" in annotation:
        return RAW_EXTENSION
    if "Time" in annotation.replace("DateTime", ""):
        return TIME
    return None


class _Builder:
    """Walks model classes into components; `out` is shared by everything one document needs."""

    def __init__(self, out: dict[str, Schema]) -> None:
        self.out = out

    def struct(self, cls: type, info: mi.StructType | None = None) -> str:
        name = component_name(cls)
        if name in self.out:
            return name
        self.out[name] = {}  # claimed first: recursive types (JSONSchemaProps) refer to themselves
        if info is None:
            info = bs.struct_info(cls)
        cname = cls.__name__
        props: dict[str, Schema] = {}
        required: list[str] = []
        for f in info.fields:
            key = (cname, f.encode_name)
            annotation = str(cls.__annotations__.get(f.name, ""))
            siblings: Schema = {}
            doc = bs._field_doc(cls, f.encode_name)
            if doc:
                siblings["description"] = doc
            siblings.update(bs._FIELD_EXT.get(key, {}))
            props[f.encode_name] = self.field(f.type, key, annotation, siblings, f.required)
            if f.required and key not in bs._NOT_REQUIRED:
                required.append(f.encode_name)
        schema: Schema = {}
        desc = bs._class_doc(cls)
        if desc:
            schema["description"] = desc
        schema["type"] = "object"
        schema["properties"] = props
        if required:
            schema["required"] = sorted(required)
        if cname in bs._ATOMIC_STRUCTS:
            schema["x-kubernetes-map-type"] = "atomic"
        self.out[name] = schema
        return name

    def field(self, t: mi.Type, key: tuple[str, str], annotation: str, siblings: Schema, required: bool) -> Schema:
        override = bs._MAP_VALUES.get(key)
        if key in _MAPS_OF:
            return {**siblings, "type": "object", "additionalProperties": self.scalar(_MAPS_OF[key], {"default": {}})}
        if override is bs._QUANTITY_MAP:
            return {**siblings, "type": "object", "additionalProperties": self.scalar(QUANTITY, {"default": {}})}
        if override is not None and key != ("ManagedFieldsEntry", "fieldsV1") and key != ("ControllerRevision", "data"):
            return {**siblings, **override}
        named = _named(annotation)
        if named is not None and not annotation.startswith(("Optional[List", "List", "Optional[dict", "dict")):
            return self.scalar(named, siblings)
        return self.type(t, key, siblings, required)

    def scalar(self, name: str, siblings: Schema) -> Schema:
        self.out.setdefault(name, SCALARS[name])
        return ref(name, siblings)

    def type(self, t: mi.Type, key: tuple[str, str], siblings: Schema, required: bool) -> Schema:
        if isinstance(t, mi.UnionType):
            kinds = [x for x in t.types if not isinstance(x, mi.NoneType)]
            if len(kinds) == 1:
                return self.type(kinds[0], key, siblings, required)
            if {type(x) for x in kinds} == {mi.IntType, mi.StrType}:
                return self.scalar(INT_OR_STRING, siblings)
            return {**siblings, "x-kubernetes-preserve-unknown-fields": True}
        if isinstance(t, mi.StructType):
            name = self.struct(t.cls, t)
            return ref(name, {"default": {}, **siblings} if required else siblings)
        if isinstance(t, mi.ListType):
            item = t.item_type
            if isinstance(item, mi.StructType):
                items = ref(self.struct(item.cls, item), {"default": {}})
            elif isinstance(item, mi.StrType):
                items = {"type": "string", "default": ""}
            else:
                items = self.type(item, key, {}, False)
            return {**siblings, "type": "array", "items": items}
        if isinstance(t, mi.DictType):
            return {**siblings, "type": "object", "additionalProperties": {"type": "string", "default": ""}}
        if isinstance(t, mi.DateTimeType):
            return self.scalar(TIME, siblings)
        plain = bs._type(t, key, (), False, False)
        return {**siblings, **plain}


@cache
def kind_components(group: str, version: str, kind: str) -> tuple[str, dict[str, Schema]]:
    """(the kind's component name, every component it needs). Shared: treat as read-only."""
    out: dict[str, Schema] = {}
    b = _Builder(out)
    name = b.struct(bs.MODELS[(group, version, kind)])
    root = dict(out[name])
    props = dict(root.get("properties") or {})
    for field in ("metadata", "spec", "status"):  # value types in Go: kube defaults them to {}
        p = props.get(field)
        if isinstance(p, dict) and ("$ref" in p or "allOf" in p):
            siblings = {k: v for k, v in p.items() if k not in ("$ref", "allOf")}
            target = p["$ref"] if "$ref" in p else p["allOf"][0]["$ref"]
            props[field] = ref(target[len(REF):], {"default": {}, **siblings})
    root["properties"] = props
    out[name] = root
    return name, out


@cache
def meta_components() -> dict[str, Schema]:
    """ObjectMeta, ListMeta and Status with what they reference (every document has them)."""
    from lightkube.models import meta_v1

    out: dict[str, Schema] = {}
    b = _Builder(out)
    for cls in (meta_v1.ObjectMeta, meta_v1.ListMeta, meta_v1.Status, meta_v1.DeleteOptions):
        b.struct(cls)
    status = dict(out[META + "Status"])
    status["x-kubernetes-group-version-kind"] = [{"group": "", "kind": "Status", "version": "v1"}]
    out[META + "Status"] = status
    return out
