"""OpenAPI v2 (/openapi/v2) and v3 (/openapi/v3, /openapi/v3/<gv>) documents from served resources.

What clients read from them:
- kubectl (--validate=strict, the default) looks, in the group-version v3 document, for a PATCH
  operation tagged with the kind's `x-kubernetes-group-version-kind` whose parameters include the
  `fieldValidation` query parameter (cli-runtime's queryParamVerifierV3). Found → it sends
  `?fieldValidation=Strict` and lets the server reject unknown fields. So every PATCH here declares it.
- kubectl apply / explain find a kind's schema in `components.schemas` (v3) or `definitions` (v2)
  by the same gvk extension and read x-kubernetes-patch-* from it for strategic merge patches.
- The v2 document must parse with kube-openapi's proto model: one `type` per schema, `items` for
  arrays, no oneOf/anyOf; typeless schemas are "arbitrary" values.

Documents are cached on the identity of the resources' schemas (built-ins share theirs), so serving
/openapi/v3 repeatedly costs a dictionary lookup.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import OrderedDict
from typing import Any

from isthmus.apiserver.openapi import builtin_schemas, components
from isthmus.apiserver.registry.resources import ResourceInfo

Doc = dict[str, Any]
_VERSION = "v1.32.0"

_BUILTIN_PREFIX = {"apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
                   "apiregistration.k8s.io": "io.k8s.kube-aggregator.pkg.apis.apiregistration"}


def definition_name(info: ResourceInfo) -> str:
    """Kube's schema name: io.k8s.api.core.v1.Service, io.k8s.api.apps.v1.Deployment, and for CRDs the
    reversed group: widgets.example.com/v1 Widget → com.example.v1.Widget."""
    if info.builtin:
        if info.group in _BUILTIN_PREFIX:
            prefix = _BUILTIN_PREFIX[info.group]
        else:
            prefix = "io.k8s.api." + (info.group.split(".")[0] if info.group else "core")
    else:
        prefix = ".".join(reversed(info.group.split("."))) if info.group else "core"
    return f"{prefix}.{info.version}.{info.kind}"


def _gvk(info: ResourceInfo, kind: str | None = None) -> dict[str, str]:
    return {"group": info.group, "version": info.version, "kind": kind or info.kind}


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _op_suffix(info: ResourceInfo) -> str:
    """operationId pieces like kube's: CoreV1, AppsV1, NetworkingV1, ExampleComV1."""
    if not info.group:
        g = "Core"
    elif info.builtin and info.group.endswith(".k8s.io"):
        g = info.group.split(".")[0].capitalize()
    else:
        g = "".join(p.capitalize() for p in info.group.replace("-", ".").split("."))
    return g + info.version.capitalize()


# ---------------------------------------------------------------- parameters

_DESC = {
    "dryRun": "When present, indicates that modifications should not be persisted. Valid values are: - All: all "
    "dry run stages will be processed",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making these changes.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the request "
    "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
    "force": 'Force is going to "force" Apply requests. It means user will re-acquire conflicting fields '
    "owned by other people. Force flag must be unset for non-apply patch requests.",
    "pretty": "If 'true', then the output is pretty printed.",
    "name": "name of the resource",
    "namespace": "object name and auth scope, such as for teams and projects",
}

_LIST_PARAMS = [
    ("allowWatchBookmarks", "boolean"),
    ("continue", "string"),
    ("fieldSelector", "string"),
    ("labelSelector", "string"),
    ("limit", "integer"),
    ("resourceVersion", "string"),
    ("resourceVersionMatch", "string"),
    ("sendInitialEvents", "boolean"),
    ("timeoutSeconds", "integer"),
    ("watch", "boolean"),
]


def _param(name: str, typ: str, v3: bool, where: str = "query", required: bool = False) -> Doc:
    p: Doc = {"name": name, "in": where, "description": _DESC.get(name, name)}
    if v3:
        p["schema"] = {"type": typ, "uniqueItems": True}
    else:
        p["type"] = typ
        p["uniqueItems"] = True
    if required:
        p["required"] = True
    return p


def _write_params(v3: bool, patch: bool = False) -> list[Doc]:
    ps = [
        _param("dryRun", "string", v3),
        _param("fieldManager", "string", v3),
        _param("fieldValidation", "string", v3),
    ]
    if patch:
        ps.append(_param("force", "boolean", v3))
    return ps


# ---------------------------------------------------------------- schema conversion


def _to_v2(s: Any) -> Any:
    """Down-convert a v3 structural schema to what Swagger 2.0 / kube-openapi proto accept."""
    if isinstance(s, list):
        return [_to_v2(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: Doc = {}
    for key, val in s.items():
        if key in ("oneOf", "anyOf", "allOf", "not", "nullable"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {k: _to_v2(v) for k, v in val.items()} if isinstance(val, dict) else val
        elif key in ("items", "additionalProperties"):
            out[key] = _to_v2(val)
        else:
            out[key] = copy.deepcopy(val)
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)  # arbitrary in v2, as kube publishes CRD int-or-string there
    if isinstance(out.get("type"), list):
        out.pop("type")
    if out.get("type") == "array" and not isinstance(out.get("items"), dict):
        out["items"] = {}
    return out


# ---------------------------------------------------------------- paths


def _responses(ref: str, codes: tuple[str, ...], v3: bool) -> Doc:
    out: Doc = {}
    for code in codes:
        desc = {"200": "OK", "201": "Created", "202": "Accepted"}.get(code, "OK")
        if v3:
            out[code] = {
                "description": desc,
                "content": {ct: {"schema": {"$ref": ref}} for ct in ("application/json", "application/yaml")},
            }
        else:
            out[code] = {"description": desc, "schema": {"$ref": ref}}
    out["401"] = {"description": "Unauthorized"}
    return out


def _body(ref: str, v3: bool, patch: bool, builtin: bool) -> Doc | list[Doc]:
    if patch:
        types = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
        if builtin:
            types.insert(2, "application/strategic-merge-patch+json")
        if v3:
            return {"content": {t: {"schema": {"type": "object"}} for t in types}, "required": True}
        return [{"name": "body", "in": "body", "required": True, "schema": {"type": "object"}}]
    if v3:
        return {"content": {"*/*": {"schema": {"$ref": ref}}}, "required": True}
    return [{"name": "body", "in": "body", "required": True, "schema": {"$ref": ref}}]


def _operation(
    info: ResourceInfo, verb: str, action: str, op_id: str, ref: str, v3: bool, *, sub: str = ""
) -> Doc:
    """One operation with kube's extensions; `verb` is the HTTP method."""
    kind = info.kind
    op: Doc = {
        "description": f"{action} {'status of ' if sub else ''}the specified {kind}",
        "operationId": op_id,
        "tags": [_op_suffix(info)[0].lower() + _op_suffix(info)[1:]],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(info),
    }
    if not v3:
        op["consumes"] = (
            ["*/*"]
            if verb != "patch"
            else [
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]
            + (["application/strategic-merge-patch+json"] if info.builtin else [])
        )
        op["produces"] = ["application/json", "application/yaml"]
        op["schemes"] = ["https"]
    params: list[Doc] = []
    if verb in ("post", "put", "patch"):
        params = _write_params(v3, patch=(verb == "patch"))
        body = _body(ref, v3, verb == "patch", info.builtin)
        if v3:
            op["requestBody"] = body
        else:
            assert isinstance(body, list)
            params = body + params
        codes: tuple[str, ...] = ("200", "201") if verb != "post" else ("200", "201", "202")
        op["responses"] = _responses(ref, codes, v3)
    elif verb == "delete":
        params = [
            _param("dryRun", "string", v3),
            _param("gracePeriodSeconds", "integer", v3),
            _param("propagationPolicy", "string", v3),
        ]
        op["responses"] = _responses(
            "#/"
            + ("components/schemas/" if v3 else "definitions/")
            + "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
            ("200", "202"),
            v3,
        )
    elif action == "list":
        params = [_param(n, t, v3) for n, t in _LIST_PARAMS]
        op["responses"] = _responses(ref, ("200",), v3)
    else:
        op["responses"] = _responses(ref, ("200",), v3)
    if params:
        op["parameters"] = params
    return op


def _paths_for(info: ResourceInfo, v3: bool) -> dict[str, Doc]:
    base = "/api/" + info.version if not info.group else f"/apis/{info.group}/{info.version}"
    root = "#/components/schemas/" if v3 else "#/definitions/"
    ref = root + definition_name(info)
    list_ref = ref + "List"
    suffix = _op_suffix(info)
    scope = "Namespaced" if info.namespaced else ""
    kind = info.kind
    collection = (
        f"{base}/namespaces/{{namespace}}/{info.plural}" if info.namespaced else f"{base}/{info.plural}"
    )
    item = collection + "/{name}"
    common = [_param("pretty", "string", v3)]
    ns_param = [_param("namespace", "string", v3, "path", True)] if info.namespaced else []
    name_param = [_param("name", "string", v3, "path", True)]
    verbs = set(info.verbs)
    paths: dict[str, Doc] = {}

    coll: Doc = {"parameters": ns_param + common}
    if "list" in verbs:
        coll["get"] = _operation(info, "get", "list", f"list{suffix}{scope}{kind}", list_ref, v3)
    if "create" in verbs:
        coll["post"] = _operation(info, "post", "post", f"create{suffix}{scope}{kind}", ref, v3)
    if "deletecollection" in verbs:
        coll["delete"] = _operation(
            info, "delete", "deletecollection", f"deleteCollection{suffix}{scope}{kind}", ref, v3
        )
    paths[collection] = coll

    it: Doc = {"parameters": name_param + ns_param + common}
    for verb, action, prefix, need in (
        ("get", "get", "read", "get"),
        ("put", "put", "replace", "update"),
        ("patch", "patch", "patch", "patch"),
        ("delete", "delete", "delete", "delete"),
    ):
        if need in verbs:
            it[verb] = _operation(info, verb, action, f"{prefix}{suffix}{scope}{kind}", ref, v3)
    paths[item] = it

    if info.has_status:
        st: Doc = {"parameters": name_param + ns_param + common}
        for verb, action, prefix in (
            ("get", "get", "read"),
            ("put", "put", "replace"),
            ("patch", "patch", "patch"),
        ):
            st[verb] = _operation(
                info, verb, action, f"{prefix}{suffix}{scope}{kind}Status", ref, v3, sub="status"
            )
        paths[item + "/status"] = st

    if info.namespaced and "list" in verbs:
        paths[f"{base}/{info.plural}"] = {
            "parameters": common,
            "get": _operation(info, "get", "list", f"list{suffix}{kind}ForAllNamespaces", list_ref, v3),
        }
    if v3 and info.builtin and (info.group, info.version, info.plural) == ("", "v1", "pods"):
        for sub, (group, version, sub_kind) in _POD_CREATE_SUBRESOURCES.items():
            paths[f"{item}/{sub}"] = {"parameters": name_param + ns_param + common,
                                      "post": _subresource_create(info, sub, group, version, sub_kind)}
    return paths


# The Pod subresources kube serves as a create of another kind (handlers/binding.py, eviction.py).
_POD_CREATE_SUBRESOURCES = {"binding": ("", "v1", "Binding"), "eviction": ("policy", "v1", "Eviction")}


def _subresource_create(info: ResourceInfo, sub: str, group: str, version: str, kind: str) -> Doc:
    """POST pods/<name>/binding|eviction as kube documents it: the body and answer typed as the kind."""
    ref = components.REF + (f"io.k8s.api.{group or 'core'}.{version}.{kind}")
    return {
        "description": f"create {kind.lower()} of a Pod",
        "operationId": f"create{_op_suffix(info)}NamespacedPod{kind}",
        "tags": [_op_suffix(info)[0].lower() + _op_suffix(info)[1:]],
        "x-kubernetes-action": "post",
        "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
        "requestBody": _body(ref, True, False, True),
        "parameters": _write_params(True),
        "responses": _responses(ref, ("200", "201", "202"), True),
    }


# ---------------------------------------------------------------- shared definitions



def _list_schema(info: ResourceInfo, ref: str) -> Doc:
    return {
        "description": f"{info.kind}List is a list of {info.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {"type": "array", "items": {"$ref": ref}},
            "metadata": {
                "type": "object",
                "properties": {
                    "continue": {"type": "string"},
                    "remainingItemCount": {"type": "integer", "format": "int64"},
                    "resourceVersion": {"type": "string"},
                    "selfLink": {"type": "string"},
                },
            },
        },
        "x-kubernetes-group-version-kind": [_gvk(info, info.list_kind)],
    }


def _kind_schema(info: ResourceInfo, v3: bool) -> Doc:
    base: Doc = (
        info.schema
        if info.schema is not None
        else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    schema: Doc = copy.deepcopy(base) if v3 else _to_v2(base)
    schema["x-kubernetes-group-version-kind"] = [_gvk(info)]
    return schema


def _v3_list_schema(info: ResourceInfo, name: str) -> Doc:
    """A kind's List as kube's v3 document has it: items and metadata by reference."""
    out = _list_schema(info, components.REF + name)
    out["properties"] = {**out["properties"],
                         "items": {"type": "array", "items": components.ref(name, {"default": {}})},
                         "metadata": components.ref(components.LIST_META, {"default": {}})}
    return out


def _v3_inline_schema(info: ResourceInfo) -> Doc:
    """A kind kube publishes inline (custom resources: their CRD's schema, under a component named
    after the kind), its metadata a reference to ObjectMeta as kube's CRD builder writes it."""
    schema = _kind_schema(info, v3=True)
    props = schema.get("properties")
    if isinstance(props, dict) or schema.get("type") == "object":
        schema["properties"] = {**(props or {}), "metadata": components.ref(components.OBJECT_META, {
            "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/"
                           "sig-architecture/api-conventions.md#metadata"})}
    return schema


def _v3_components(resources: list[ResourceInfo]) -> dict[str, Doc]:
    """components.schemas of a v3 group-version document: built-in kinds as kube's named, referenced
    structs (openapi/components.py), other kinds inline; ObjectMeta, ListMeta and Status always."""
    defs: dict[str, Doc] = dict(components.meta_components())
    for info in resources:
        name = definition_name(info)
        key = (info.group, info.version, info.kind)
        if info.builtin and key in builtin_schemas.MODELS:
            root, needed = components.kind_components(*key)
            defs.update(needed)
            defs[name] = {**needed[root], "x-kubernetes-group-version-kind": [_gvk(info)]}
        else:
            defs[name] = _v3_inline_schema(info)
        defs[name + "List"] = _v3_list_schema(info, name)
        if info.builtin and (info.group, info.version, info.plural) == ("", "v1", "pods"):
            defs.update(components.kind_components("policy", "v1", "Eviction")[1])  # pods/eviction's body
    return dict(sorted(defs.items()))


# The scalar wrappers as kube's swagger 2.0 document has them (no oneOf there).
_V2_SCALARS = {components.INT_OR_STRING: {"type": "string", "format": "int-or-string"},
               components.QUANTITY: {"type": "string"}}


def _v2_schema(schema: Any) -> Any:
    """A v3 component as swagger 2.0 says it: `allOf: [$ref]` wrappers unwrapped (kube's v2 keeps a
    $ref's siblings beside it), references to #/definitions/, then _to_v2."""
    if isinstance(schema, list):
        return [_v2_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: Doc = {}
    for key, val in schema.items():
        if key == "allOf" and len(val) == 1 and isinstance(val[0], dict) and "$ref" in val[0]:
            out["$ref"] = "#/definitions/" + str(val[0]["$ref"]).removeprefix(components.REF)
        elif key == "$ref":
            out["$ref"] = "#/definitions/" + str(val).removeprefix(components.REF)
        elif key in ("properties", "patternProperties") and isinstance(val, dict):
            out[key] = {k: _v2_schema(v) for k, v in val.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _v2_schema(val)
        else:
            out[key] = val
    return out


def _v2_components(resources: list[ResourceInfo]) -> dict[str, Doc]:
    """definitions of the swagger 2.0 document: the v3 components, said in 2.0."""
    out: dict[str, Doc] = {}
    for name, schema in _v3_components(resources).items():
        if name in _V2_SCALARS:
            desc = schema.get("description")
            out[name] = {**({"description": desc} if desc else {}), **_V2_SCALARS[name]}
        else:
            out[name] = _to_v2(_v2_schema(schema))
    return out


def _components(resources: list[ResourceInfo], v3: bool) -> dict[str, Doc]:
    if v3:
        return _v3_components(resources)
    return _v2_components(resources)


def _info_block() -> Doc:
    return {"title": "Kubernetes", "version": _VERSION}


# ---------------------------------------------------------------- cache


class _Cache:
    """A small LRU keyed on the resources' identity; entries keep the schemas alive so ids stay unique."""

    def __init__(self, size: int = 32) -> None:
        self._data: OrderedDict[tuple[Any, ...], tuple[list[ResourceInfo], Any]] = OrderedDict()
        self._size = size

    @staticmethod
    def key(tag: str, resources: list[ResourceInfo]) -> tuple[Any, ...]:
        return (
            tag,
            *(
                (
                    r.group,
                    r.version,
                    r.plural,
                    r.kind,
                    r.namespaced,
                    r.has_status,
                    r.builtin,
                    tuple(r.verbs),
                    id(r.schema),
                )
                for r in resources
            ),
        )

    def get(self, key: tuple[Any, ...]) -> Any:
        hit = self._data.get(key)
        if hit is None:
            return None
        self._data.move_to_end(key)
        return hit[1]

    def put(self, key: tuple[Any, ...], resources: list[ResourceInfo], value: Any) -> None:
        self._data[key] = (list(resources), value)
        self._data.move_to_end(key)
        while len(self._data) > self._size:
            self._data.popitem(last=False)


_CACHE = _Cache()


def resources_key(resources: list[ResourceInfo]) -> tuple[Any, ...]:
    """The identity of a set of served resources, as the document caches see it. It holds the ids of
    their schemas: keep the resources alive for as long as the key is kept."""
    return _Cache.key("", resources)


def doc_hash(doc: Doc) -> str:
    """Stable content hash (kube publishes an uppercase SHA-512 hex in serverRelativeURL)."""
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha512(data).hexdigest().upper()


# ---------------------------------------------------------------- public


def openapi_v2(resources: list[ResourceInfo]) -> dict[str, Any]:
    key = _Cache.key("v2", resources)
    hit = _CACHE.get(key)
    if hit is not None:
        return dict(hit)
    paths: dict[str, Doc] = {}
    for info in sorted(resources, key=lambda r: (r.group, r.version, r.plural)):
        paths.update(_paths_for(info, v3=False))
    doc: Doc = {
        "swagger": "2.0",
        "info": _info_block(),
        "paths": dict(sorted(paths.items())),
        "definitions": _components(resources, v3=False),
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "type": "apiKey",
                "name": "authorization",
                "in": "header",
            }
        },
        "security": [{"BearerToken": []}],
    }
    _CACHE.put(key, resources, doc)
    return doc


def _group_versions(resources: list[ResourceInfo]) -> list[tuple[str, str]]:
    return sorted({(r.group, r.version) for r in resources})


def openapi_v3_index(resources: list[ResourceInfo]) -> dict[str, Any]:
    """{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}, "apis/<g>/<v>": ...}}"""
    paths: dict[str, Doc] = {}
    for group, version in _group_versions(resources):
        doc = openapi_v3_group(resources, group, version)
        if doc is None:
            continue
        gv = _gv_path(group, version)
        paths[gv] = {
            "serverRelativeURL": f"/openapi/v3/{gv}?hash={_group_hash(resources, group, version, doc)}"
        }
    return {"paths": paths}


def _group_hash(resources: list[ResourceInfo], group: str, version: str, doc: Doc) -> str:
    served = [r for r in resources if r.group == group and r.version == version]
    key = _Cache.key(f"v3hash:{group}/{version}", served)
    hit = _CACHE.get(key)
    if hit is None:
        hit = doc_hash(doc)
        _CACHE.put(key, served, hit)
    return str(hit)


def openapi_v3_group(resources: list[ResourceInfo], group: str, version: str) -> dict[str, Any] | None:
    """The v3 document of one group/version, None if not served."""
    served = [r for r in resources if r.group == group and r.version == version]
    if not served:
        return None
    key = _Cache.key(f"v3:{group}/{version}", served)
    hit = _CACHE.get(key)
    if hit is not None:
        return dict(hit)
    paths: dict[str, Doc] = {}
    for info in sorted(served, key=lambda r: r.plural):
        paths.update(_paths_for(info, v3=True))
    doc: Doc = {
        "openapi": "3.0.0",
        "info": _info_block(),
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": _components(served, v3=True),
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                }
            },
        },
        "security": [{"BearerToken": []}],
    }
    _CACHE.put(key, served, doc)
    return doc
